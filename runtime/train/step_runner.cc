// `deltatune step`: load, pack, forward, backward, and the optional gradient / update exports.
#include "runtime/train/step_runner.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_lora.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/lora.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/optim/adamw.h"
#if DELTATUNE_HAVE_CUDA
#include "runtime/optim/gpu_optimizer.h"
#endif

namespace deltatune {

namespace {

// `set` as fp32 safetensors, each tensor named prefix + its checkpoint name (PEFT's for an
// adapter's tensors).
absl::Status write_params(const std::string& path, const HfModel& model, const ParamSet& set,
                          const std::string& prefix, bool peft = false) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& p : set.all()) {
        const std::string name =
            peft ? peft_name(p.name, model.layout) : checkpoint_name(p.name, model.layout);
        out.emplace_back(prefix + name, p.value);
    }
    return write_safetensors(path, out);
}

#if DELTATUNE_HAVE_CUDA
// Forward and backward on the GPU, timed from an idle device to the last kernel.
absl::Status timed_forward_backward(DeviceContext& ctx, Qwen35GpuModel& net,
                                    const PackedBatch& packed, StepReport& report) {
    DT_RETURN_IF_ERROR(ctx.synchronize());
    const auto start = std::chrono::steady_clock::now();
    DT_ASSIGN_OR_RETURN(LossResult loss, net.forward(packed));
    DT_RETURN_IF_ERROR(net.backward());
    DT_RETURN_IF_ERROR(ctx.synchronize());
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.loss = loss.loss;
    report.label_tokens = loss.label_tokens;
    return absl::OkStatus();
}

// The GPU path: same report and exports, gradients and updated parameters come back as fp32.
absl::Status run_step_cuda(const StepOptions& options, HfModel& model, const PackedBatch& packed,
                           StepReport& report) {
    DT_ASSIGN_OR_RETURN(Recompute recompute, parse_recompute(options.recompute));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> ctx, DeviceContext::create(Device::cuda(0)));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35GpuModel> net,
                        Qwen35GpuModel::create(*ctx, model.config, model.params, recompute));
    DT_RETURN_IF_ERROR(timed_forward_backward(*ctx, *net, packed, report));
    DT_ASSIGN_OR_RETURN(GpuParamStore * store, net->param_store());
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuOptimizer> optimizer,
                        GpuOptimizer::create(*ctx, *store, /*comm=*/nullptr));
    DT_ASSIGN_OR_RETURN(report.grad_norm, optimizer->grad_norm());
    if (!options.grads_out.empty()) {
        ParamSet grads = model.params.zeros_like();
        DT_RETURN_IF_ERROR(net->download_grads(grads));
        DT_RETURN_IF_ERROR(write_params(options.grads_out, model, grads, "grad."));
    }
    if (!options.update_out.empty()) {
        DT_RETURN_IF_ERROR(
            optimizer->step(options.adamw, /*step=*/1, /*max_grad_norm=*/0).status());
        DT_RETURN_IF_ERROR(net->download_params(model.params));
        DT_RETURN_IF_ERROR(write_params(options.update_out, model, model.params, ""));
    }
    return absl::OkStatus();
}

#endif

// The LoRA step on the CPU reference: the base frozen, the adapter's gradients and update.
absl::Status run_step_lora(const StepOptions& options, HfModel& model, const PackedBatch& packed,
                           StepReport& report) {
    DT_ASSIGN_OR_RETURN(PeftAdapter adapter, load_peft_adapter(options.adapter_dir, model));
    ParamSet adapter_grads = adapter.params.zeros_like();
    const auto start = std::chrono::steady_clock::now();
    Qwen35CpuModel net(model.config, model.params);
    net.attach_adapter(adapter.params, adapter_grads, adapter.spec.scale());
    DT_ASSIGN_OR_RETURN(LossResult loss, net.forward(packed));
    // The small base gradients the blocks form on the way; not reported.
    Qwen35CpuModel::FrozenBaseGrads base_grads =
        Qwen35CpuModel::frozen_base_grads(model.config, model.params);
    DT_RETURN_IF_ERROR(net.backward(base_grads.set));
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.loss = loss.loss;
    report.label_tokens = loss.label_tokens;
    report.grad_norm = global_norm(adapter_grads);
    if (!options.grads_out.empty()) {
        DT_RETURN_IF_ERROR(write_params(options.grads_out, model, adapter_grads, "grad.", true));
    }
    if (!options.update_out.empty()) {
        update_from_fresh_state(adapter.params, adapter_grads, options.adamw);
        DT_RETURN_IF_ERROR(write_params(options.update_out, model, adapter.params, "", true));
    }
    return absl::OkStatus();
}

#if DELTATUNE_HAVE_CUDA
// The LoRA step on the GPU: the base frozen in the model's buffers, the adapter in
// GpuLoraAdapters; the same report and exports as the CPU reference's.
absl::Status run_step_lora_cuda(const StepOptions& options, HfModel& model,
                                const PackedBatch& packed, StepReport& report) {
    DT_ASSIGN_OR_RETURN(PeftAdapter adapter, load_peft_adapter(options.adapter_dir, model));
    DT_ASSIGN_OR_RETURN(Recompute recompute, parse_recompute(options.recompute));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> ctx, DeviceContext::create(Device::cuda(0)));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35GpuModel> net,
                        Qwen35GpuModel::create(*ctx, model.config, model.params, recompute));
    DT_ASSIGN_OR_RETURN(
        std::unique_ptr<GpuLoraAdapters> lora,
        GpuLoraAdapters::create(*ctx, model.config, adapter.params, adapter.spec.scale()));
    DT_RETURN_IF_ERROR(net->attach_lora(*lora));
    DT_RETURN_IF_ERROR(timed_forward_backward(*ctx, *net, packed, report));
    ParamSet grads = adapter.params.zeros_like();
    DT_RETURN_IF_ERROR(lora->download_grads(grads));
    report.grad_norm = global_norm(grads);
    if (!options.grads_out.empty()) {
        DT_RETURN_IF_ERROR(write_params(options.grads_out, model, grads, "grad.", true));
    }
    if (!options.update_out.empty()) {
        DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuOptimizer> optimizer,
                            GpuOptimizer::create(*ctx, *lora, /*comm=*/nullptr));
        DT_RETURN_IF_ERROR(
            optimizer->step(options.adamw, /*step=*/1, /*max_grad_norm=*/0).status());
        DT_RETURN_IF_ERROR(lora->download(adapter.params));
        DT_RETURN_IF_ERROR(write_params(options.update_out, model, adapter.params, "", true));
    }
    return absl::OkStatus();
}
#endif

}  // namespace

absl::StatusOr<StepReport> run_step(const StepOptions& options) {
    if (options.device != "cpu" && options.device != "cuda") {
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
    if (!options.adapter_dir.empty()) {
        if (options.device == "cuda") {
#if DELTATUNE_HAVE_CUDA
            DT_RETURN_IF_ERROR(run_step_lora_cuda(options, model, *packed, report));
            return report;
#else
            return absl::FailedPreconditionError("--device cuda needs a CUDA build");
#endif
        }
        DT_RETURN_IF_ERROR(run_step_lora(options, model, *packed, report));
        return report;
    }
    if (options.device == "cuda") {
#if DELTATUNE_HAVE_CUDA
        DT_RETURN_IF_ERROR(run_step_cuda(options, model, *packed, report));
        return report;
#else
        return absl::FailedPreconditionError("--device cuda needs a CUDA build");
#endif
    }

    const auto start = std::chrono::steady_clock::now();
    Qwen35CpuModel net(model.config, model.params);
    DT_ASSIGN_OR_RETURN(LossResult loss, net.forward(*packed));
    ParamSet grads = model.params.zeros_like();
    DT_RETURN_IF_ERROR(net.backward(grads));
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.loss = loss.loss;
    report.label_tokens = loss.label_tokens;
    report.grad_norm = global_norm(grads);

    if (!options.grads_out.empty())
        DT_RETURN_IF_ERROR(write_params(options.grads_out, model, grads, "grad."));
    if (!options.update_out.empty()) {
        update_from_fresh_state(model.params, grads, options.adamw);
        DT_RETURN_IF_ERROR(write_params(options.update_out, model, model.params, ""));
    }
    return report;
}

}  // namespace deltatune
