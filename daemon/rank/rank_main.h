// `deltatuned rank ...`: one rank process of a job attempt. It trains with runtime/train and
// reports to the supervisor over the local RankService socket; the supervisor's directives stop it.
// Exit codes: 0 finished (export done) or stopped as directed; 2 invalid job (bad config or data:
// retrying cannot help); 1 any other failure (the supervisor treats it as a fault and retries).
#pragma once

namespace deltatune {

int rank_main(int argc, char** argv);

}  // namespace deltatune
