// deltatune kernels: prints, per op of the training step, the implementation this machine will
// use and why; with a model config the shape checks apply too, and the projections FP8 would
// cover are listed. --strict exits 1 when an op (not allowed) would run on anything but its fused
// kernel, printing why.
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/kernel_registry.h"

namespace deltatune::cli {

namespace {

struct KernelsFlags {
    std::string model, config, allow;
    bool strict = false;
};

// Which projections `precision: {projections: fp8}` would run in FP8 here.
std::string fp8_line(const Qwen35Config& config, const MachineInfo& machine) {
    const std::vector<std::string> fp8 = fp8_projection_modules(config, machine.gpu);
    if (fp8.empty()) return "fp8 projections: none here (Hopper GPUs only)\n";
    return absl::StrCat("fp8 projections (precision.projections: fp8): ", absl::StrJoin(fp8, " "),
                        "\n");
}

absl::StatusOr<std::string> run_kernels(const KernelsFlags& f, bool& strict_ok) {
    std::optional<Qwen35Config> config;
    std::string path = f.config;
    if (path.empty() && !f.model.empty()) path = f.model + "/config.json";
    if (!path.empty()) {
        DT_ASSIGN_OR_RETURN(config, load_qwen35_config(path));
    }
    const MachineInfo machine = probe_machine();
    const KernelRegistry reg = kernel_registry_for(machine, config ? &*config : nullptr);
    std::string out = format_registry(reg);
    if (config) out += fp8_line(*config, machine);
    strict_ok = true;
    if (f.strict) {
        std::vector<std::string> allow;
        if (!f.allow.empty()) allow = absl::StrSplit(f.allow, ',');
        const absl::Status s = check_strict(reg, allow);
        if (!s.ok()) {
            strict_ok = false;
            out += std::string(s.message()) + "\n";
        } else {
            out += "strict: ok\n";
        }
    }
    return out;
}

int print_kernels(const KernelsFlags& f) {
    bool strict_ok = true;
    auto out = run_kernels(f, strict_ok);
    if (!out.ok()) {
        return fail("kernels", out.status());
    }
    std::fputs(out->c_str(), stdout);
    return strict_ok ? 0 : 1;
}

}  // namespace

CommandRun kernels_command(CLI::App& app) {
    auto f = std::make_shared<KernelsFlags>();
    app.add_option("--model", f->model, "apply this model's shape checks too")->type_name("DIR");
    app.add_option("--config", f->config, "... or this model config's")->type_name("CONFIG.json");
    app.add_flag("--strict", f->strict,
                 "exit 1, saying why, when an op would run on anything but its fused kernel");
    app.add_option("--allow", f->allow, "ops --strict lets fall back")->type_name("OP,...");
    return [f] { return print_kernels(*f); };
}

}  // namespace deltatune::cli
