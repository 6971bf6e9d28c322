// deltatune kernels [--model DIR | --config CONFIG.json] [--strict] [--allow OP,OP...]
// Prints, per op of the training step, the implementation this machine will use and why; with a
// model config the shape checks apply too. --strict exits 1 when an op (not allowed) would run on
// anything but its fused kernel, printing why.
#include <cstdio>
#include <optional>

#include "absl/strings/str_split.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "daemon/cli/job_client.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/kernel_registry.h"

namespace deltatune::cli {

namespace {

absl::StatusOr<std::string> run_kernels(const std::vector<std::string>& args, bool& strict_ok) {
    DT_ASSIGN_OR_RETURN(Flags f,
                        Flags::parse(args, {"model", "config", "strict", "allow"}, {"strict"}));
    std::optional<Qwen35Config> config;
    std::string path = f.get("config");
    if (path.empty() && !f.get("model").empty()) path = f.get("model") + "/config.json";
    if (!path.empty()) {
        DT_ASSIGN_OR_RETURN(config, load_qwen35_config(path));
    }
    const KernelRegistry reg = kernel_registry_for(probe_machine(), config ? &*config : nullptr);
    std::string out = format_registry(reg);
    strict_ok = true;
    if (f.has("strict")) {
        std::vector<std::string> allow;
        if (!f.get("allow").empty()) allow = absl::StrSplit(f.get("allow"), ',');
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

}  // namespace

int kernels_command(const std::vector<std::string>& args) {
    bool strict_ok = true;
    auto out = run_kernels(args, strict_ok);
    if (!out.ok()) {
        return fail("kernels", out.status());
    }
    std::fputs(out->c_str(), stdout);
    return strict_ok ? 0 : 1;
}

}  // namespace deltatune::cli
