// deltatune init-model --config CONFIG.json --out DIR [--seed N]
#include <cstdio>

#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "daemon/cli/job_client.h"
#include "runtime/model/init_model.h"

namespace deltatune::cli {

int init_model_command(const std::vector<std::string>& args) {
    auto flags = Flags::parse(args, {"config", "out", "seed"});
    absl::Status s = flags.status();
    if (s.ok()) {
        auto config = flags->require("config");
        auto out = flags->require("out");
        auto seed = flags->get_uint("seed", 0);
        s = !config.ok() ? config.status() : !out.ok() ? out.status() : seed.status();
        if (s.ok()) s = init_model(*config, *out, *seed);
        if (s.ok()) {
            std::printf("{\"model\": \"%s\", \"seed\": %llu}\n", out->c_str(),
                        static_cast<unsigned long long>(*seed));
            return 0;
        }
    }
    return fail("init-model", s);
}

}  // namespace deltatune::cli
