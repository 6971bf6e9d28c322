// deltatune step --model DIR --batch BATCH.json [--device cpu|cuda] [--grads-out F]
//                [--update-out F] [--recompute none|layer] [--lr X --beta1 X --beta2 X --eps X
//                --weight-decay X] [--adapter PEFT_DIR]
#include <cstdio>

#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "daemon/cli/job_client.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/train/step_runner.h"

namespace deltatune::cli {

namespace {

absl::StatusOr<StepOptions> parse_step_options(const std::vector<std::string>& args) {
    DT_ASSIGN_OR_RETURN(Flags f, Flags::parse(args, {"model", "batch", "device", "grads-out",
                                                     "update-out", "recompute", "lr", "beta1",
                                                     "beta2", "eps", "weight-decay", "adapter"}));
    StepOptions o;
    DT_ASSIGN_OR_RETURN(o.model_dir, f.require("model"));
    DT_ASSIGN_OR_RETURN(o.batch_path, f.require("batch"));
    o.device = f.get("device", "cpu");
    o.recompute = f.get("recompute", "none");
    o.grads_out = f.get("grads-out");
    o.update_out = f.get("update-out");
    o.adapter_dir = f.get("adapter");
    // Defaults are torch.optim.AdamW's.
    DT_ASSIGN_OR_RETURN(o.adamw.lr, f.get_double("lr", 1e-3));
    DT_ASSIGN_OR_RETURN(o.adamw.beta1, f.get_double("beta1", 0.9));
    DT_ASSIGN_OR_RETURN(o.adamw.beta2, f.get_double("beta2", 0.999));
    DT_ASSIGN_OR_RETURN(o.adamw.eps, f.get_double("eps", 1e-8));
    DT_ASSIGN_OR_RETURN(o.adamw.weight_decay, f.get_double("weight-decay", 1e-2));
    return o;
}

}  // namespace

int step_command(const std::vector<std::string>& args) {
    auto options = parse_step_options(args);
    absl::StatusOr<StepReport> report = options.ok() ? run_step(*options) : options.status();
    if (!report.ok()) {
        return fail("step", report.status());
    }
    nlohmann::json j = {{"loss", report->loss},           {"label_tokens", report->label_tokens},
                        {"tokens", report->tokens},       {"documents", report->documents},
                        {"grad_norm", report->grad_norm}, {"device", options->device},
                        {"seconds", report->seconds}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
}

}  // namespace deltatune::cli
