// Random lowercase hex identifiers for the daemon's resources (job ids and uids, profile ids,
// agent ids): unpredictable, from one process-wide generator seeded by std::random_device.
#pragma once

#include <string>

namespace deltatune::daemon {

std::string random_hex(int digits);
// True for what random_hex could have made with at most `max_digits` digits: the check on an id
// that comes back from a client or an agent before it names a file or folder.
bool is_random_hex(const std::string& id, size_t max_digits);

}  // namespace deltatune::daemon
