// `deltatuned agent`: a node agent (docs/multinode.md). Today it registers its machine with the
// supervisor (hostname, address, GPUs, CPU ranks offered) and heartbeats, registering again when
// the supervisor no longer knows it; launching the ranks it is assigned comes next.
#pragma once

namespace deltatune::daemon {

int agent_main(int argc, char** argv);

}  // namespace deltatune::daemon
