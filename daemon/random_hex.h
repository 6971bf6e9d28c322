// Random lowercase hex identifiers for the daemon's resources (job ids and uids, profile ids,
// agent ids): unpredictable, from one process-wide generator seeded by std::random_device.
#pragma once

#include <string>

namespace deltatune::daemon {

std::string random_hex(int digits);

}  // namespace deltatune::daemon
