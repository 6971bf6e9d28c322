// deltatune step: one training step of a model on one batch, printed as one JSON line.
#include <cstdio>
#include <memory>
#include <tuple>

#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/train/step_runner.h"

namespace deltatune::cli {

namespace {

int run_one_step(const StepOptions& options) {
    absl::StatusOr<StepReport> report = run_step(options);
    if (!report.ok()) {
        return fail("step", report.status());
    }
    nlohmann::json j = {{"loss", report->loss},           {"label_tokens", report->label_tokens},
                        {"tokens", report->tokens},       {"documents", report->documents},
                        {"grad_norm", report->grad_norm}, {"device", options.device},
                        {"seconds", report->seconds}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
}

void add_adamw_flags(CLI::App& app, AdamWHyper& adamw) {
    // Defaults are torch.optim.AdamW's.
    adamw.lr = 1e-3, adamw.beta1 = 0.9, adamw.beta2 = 0.999, adamw.eps = 1e-8;
    adamw.weight_decay = 1e-2;
    for (auto [name, value, help] :
         {std::tuple{"--lr", &adamw.lr, "learning rate"},
          std::tuple{"--beta1", &adamw.beta1, "first moment's decay"},
          std::tuple{"--beta2", &adamw.beta2, "second moment's decay"},
          std::tuple{"--eps", &adamw.eps, "added to the second moment's root"},
          std::tuple{"--weight-decay", &adamw.weight_decay, "decoupled weight decay"}}) {
        app.add_option(name, *value, help)
            ->check(daemon::number())
            ->type_name("X")
            ->group("AdamW (torch.optim.AdamW's defaults)");
    }
}

}  // namespace

CommandRun step_command(CLI::App& app) {
    auto o = std::make_shared<StepOptions>();
    app.add_option("--model", o->model_dir, "the model folder (Hugging Face)")
        ->required()
        ->type_name("DIR");
    app.add_option("--batch", o->batch_path, "the documents of the step")
        ->required()
        ->type_name("BATCH.json");
    daemon::one_of(app.add_option("--device", o->device, "where the step runs"), {"cpu", "cuda"});
    app.add_option("--grads-out", o->grads_out, "write the gradients here")
        ->type_name("F.safetensors");
    app.add_option("--update-out", o->update_out, "write the updated parameters here")
        ->type_name("F.safetensors");
    daemon::one_of(app.add_option("--recompute", o->recompute, "activation recomputation (cuda)"),
                   {"none", "layer"});
    app.add_option("--adapter", o->adapter_dir,
                   "a LoRA step on the frozen base, with this PEFT adapter (CPU)")
        ->type_name("PEFT_DIR");
    add_adamw_flags(app, o->adamw);
    return [o] { return run_one_step(*o); };
}

}  // namespace deltatune::cli
