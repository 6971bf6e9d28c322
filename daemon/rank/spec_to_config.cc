// JobSpec -> TrainConfig with the documented defaults.
#include "daemon/rank/spec_to_config.h"

#include "absl/strings/str_cat.h"

namespace deltatune {

namespace {

template <typename T>
T or_default(T value, T fallback) {
    return value == T{} ? fallback : value;
}

}  // namespace

absl::StatusOr<TrainConfig> train_config_from_spec(const v1::JobSpec& spec) {
    TrainConfig c;
    c.model_dir = spec.model();
    c.output_dir = spec.output_dir();
    if (c.model_dir.empty()) return absl::InvalidArgumentError("model: required");
    if (c.output_dir.empty()) return absl::InvalidArgumentError("output_dir: required");
    const auto& d = spec.data();
    c.train_files.assign(d.train_files().begin(), d.train_files().end());
    c.eval_files.assign(d.eval_files().begin(), d.eval_files().end());
    if (c.train_files.empty()) return absl::InvalidArgumentError("data.train_files: required");
    c.format = d.format() == v1::DATA_FORMAT_CHAT        ? DatasetFormat::kChat
               : d.format() == v1::DATA_FORMAT_TOKENIZED ? DatasetFormat::kPretokenized
                                                         : DatasetFormat::kAuto;
    c.bad_lines = d.bad_lines() == v1::BAD_LINE_POLICY_SKIP ? BadLinePolicy::kSkipAndCount
                                                            : BadLinePolicy::kFail;
    c.tokenizer = d.tokenizer();
    c.chat_template = d.chat_template();
    c.shuffle_window = or_default<int64_t>(d.shuffle_window(), 4096);
    c.max_document_bytes = or_default<int64_t>(d.max_document_bytes(), c.max_document_bytes);
    c.max_document_tokens = or_default<int64_t>(d.max_document_tokens(), c.max_document_tokens);
    const auto& h = spec.hyperparameters();
    c.max_steps = h.max_steps();
    if (c.max_steps <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("hyperparameters.max_steps: must be > 0, got ", c.max_steps));
    }
    c.tokens_per_batch = or_default<int64_t>(h.tokens_per_batch(), 8192);
    c.grad_accum = or_default<int64_t>(h.gradient_accumulation(), 1);
    c.max_grad_norm = h.has_max_grad_norm() ? h.max_grad_norm() : 1.0;
    c.lr.peak = or_default(h.learning_rate(), 1e-5);
    c.lr.warmup_steps = h.warmup_steps();
    c.lr.min_lr_ratio = h.has_min_lr_ratio() ? h.min_lr_ratio() : 0.1;
    c.lr.kind = h.lr_schedule() == v1::LR_SCHEDULE_LINEAR     ? LrScheduleKind::kLinear
                : h.lr_schedule() == v1::LR_SCHEDULE_CONSTANT ? LrScheduleKind::kConstant
                                                              : LrScheduleKind::kCosine;
    c.adamw.weight_decay = h.weight_decay();
    c.adamw.beta1 = or_default(h.beta1(), 0.9);
    c.adamw.beta2 = or_default(h.beta2(), 0.95);
    c.adamw.eps = or_default(h.eps(), 1e-8);
    c.eval_every = spec.eval_every_n_steps();
    c.checkpoint_every = spec.checkpoint().every_n_steps();
    c.keep_last_n = or_default<int64_t>(spec.checkpoint().keep_last_n(), 2);
    c.seed = spec.seed();
    // "jobs/ID" hands over that job's output_dir (its checkpoints are this job's now); a folder
    // is a checkpoint to start from.
    if (spec.resume_from().rfind("jobs/", 0) != 0) c.resume_checkpoint = spec.resume_from();
    return c;
}

}  // namespace deltatune
