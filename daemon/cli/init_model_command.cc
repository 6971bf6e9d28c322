// deltatune init-model --config CONFIG.json --out DIR [--seed N] [--device host|cuda]
// (cuda: the GPU's generator, the weights `deltatune bench` trains for the seed; for real sizes)
#include <cstdio>

#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "daemon/cli/job_client.h"
#include "runtime/model/init_model.h"

namespace deltatune::cli {

int init_model_command(const std::vector<std::string>& args) {
    auto flags = Flags::parse(args, {"config", "out", "seed", "device"});
    absl::Status s = flags.status();
    if (s.ok()) {
        auto config = flags->require("config");
        auto out = flags->require("out");
        auto seed = flags->get_uint("seed", 0);
        const std::string device = flags->get("device", "host");
        s = !config.ok() ? config.status() : !out.ok() ? out.status() : seed.status();
        if (s.ok() && device != "host" && device != "cuda") {
            s = absl::InvalidArgumentError("--device: expected host or cuda, got '" + device + "'");
        }
        if (s.ok()) {
            s = init_model(*config, *out, *seed,
                           device == "cuda" ? InitDevice::kCuda : InitDevice::kHost);
        }
        if (s.ok()) {
            std::printf("{\"model\": \"%s\", \"seed\": %llu}\n", out->c_str(),
                        static_cast<unsigned long long>(*seed));
            return 0;
        }
    }
    return fail("init-model", s);
}

}  // namespace deltatune::cli
