// `deltatune step`: load, pack, forward, backward, and the optional gradient / update exports.
#include "runtime/train/step_runner.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/file_util.h"
#include "runtime/checkpoint/hf_model_io.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/optim/adamw.h"

namespace deltatune {

namespace {

absl::Status write_params(const std::string& path, const HfModel& model, const ParamSet& set,
                          const std::string& prefix) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& p : set.all())
        out.emplace_back(prefix + checkpoint_name(p.name, model.layout), p.value);
    return write_safetensors(path, out);
}

}  // namespace

absl::StatusOr<StepReport> run_step(const StepOptions& options) {
    if (options.device == "cuda") {
        return absl::UnimplementedError(
            "--device cuda: the GPU training path is not built yet (GPU runtime issue); use "
            "--device cpu");
    }
    if (options.device != "cpu") {
        return absl::InvalidArgumentError(
            absl::StrCat("--device: expected cpu or cuda, got '", options.device, "'"));
    }
    DT_ASSIGN_OR_RETURN(HfModel model, load_hf_model(options.model_dir));
    DT_ASSIGN_OR_RETURN(std::string batch_text, read_file(options.batch_path));
    DT_ASSIGN_OR_RETURN(std::vector<Document> docs,
                        parse_batch_json(batch_text, options.batch_path));
    auto packed = pack_documents(docs, model.config.vocab_size);
    if (!packed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options.batch_path, ": ", packed.status().message()));
    }
    StepReport report;
    report.tokens = packed->tokens();
    report.documents = packed->num_docs();

    const auto start = std::chrono::steady_clock::now();
    Qwen35CpuModel net(model.config, model.params);
    DT_ASSIGN_OR_RETURN(LossResult loss, net.forward(*packed));
    ParamSet grads = model.params.zeros_like();
    DT_RETURN_IF_ERROR(net.backward(grads));
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.loss = loss.loss;
    report.label_tokens = loss.label_tokens;
    double sq = 0;
    for (const auto& g : grads.all()) {
        const float* d = g.value.data<float>();
        for (int64_t i = 0; i < g.value.numel(); ++i) sq += static_cast<double>(d[i]) * d[i];
    }
    report.grad_norm = std::sqrt(sq);

    if (!options.grads_out.empty())
        DT_RETURN_IF_ERROR(write_params(options.grads_out, model, grads, "grad."));
    if (!options.update_out.empty()) {
        AdamWState state = make_adamw_state(model.params);
        adamw_update(model.params, grads, state, options.adamw);
        DT_RETURN_IF_ERROR(write_params(options.update_out, model, model.params, ""));
    }
    return report;
}

}  // namespace deltatune
