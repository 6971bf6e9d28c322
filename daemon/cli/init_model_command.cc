// deltatune init-model: a random-initialised Hugging Face checkpoint of a model config.
#include <cstdio>
#include <memory>

#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "runtime/model/init_model.h"

namespace deltatune::cli {

namespace {

struct InitModelFlags {
    std::string config, out, device = "host";
    uint64_t seed = 0;
};

int init_model_here(const InitModelFlags& f) {
    const absl::Status s = init_model(f.config, f.out, f.seed,
                                      f.device == "cuda" ? InitDevice::kCuda : InitDevice::kHost);
    if (!s.ok()) return fail("init-model", s);
    std::printf("{\"model\": \"%s\", \"seed\": %llu}\n", f.out.c_str(),
                static_cast<unsigned long long>(f.seed));
    return 0;
}

}  // namespace

CommandRun init_model_command(CLI::App& app) {
    auto f = std::make_shared<InitModelFlags>();
    app.add_option("--config", f->config, "the model's Hugging Face config.json")
        ->required()
        ->type_name("CONFIG.json");
    app.add_option("--out", f->out, "the folder to write")->required()->type_name("DIR");
    daemon::add_count(app, "--seed", f->seed, "the generator's seed");
    daemon::one_of(
        app.add_option(
            "--device", f->device,
            "host, or cuda: the GPU's generator, the weights `deltatune bench` trains for "
            "the seed (for real sizes)"),
        {"host", "cuda"});
    return [f] { return init_model_here(*f); };
}

}  // namespace deltatune::cli
