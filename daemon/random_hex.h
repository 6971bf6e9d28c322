// Random lowercase hex identifiers and secrets for the daemon's resources (job ids and uids,
// profile ids, agent ids and secrets): from the kernel's CSPRNG (getrandom), so what a client
// sees of some never predicts the others.
#pragma once

#include <string>

namespace deltatune::daemon {

std::string random_hex(int digits);
// True for what random_hex could have made with at most `max_digits` digits: the check on an id
// that comes back from a client or an agent before it names a file or folder.
bool is_random_hex(const std::string& id, size_t max_digits);

}  // namespace deltatune::daemon
