// JobSpec -> TrainConfig, field by field.
#include "daemon/config/spec_to_config.h"

namespace deltatune {

LoraSpec lora_spec_from(const v1::AdapterSpec& a) {
    LoraSpec lora;
    lora.rank = a.rank();
    lora.alpha = a.alpha();
    lora.use_rslora = a.use_rslora();
    lora.targets = parse_lora_targets({a.target_modules().begin(), a.target_modules().end()})
                       .value_or(std::vector<Proj>{});
    return lora;
}

TrainConfig train_config_from_spec(const v1::JobSpec& spec) {
    TrainConfig c;
    c.model_dir = spec.model();
    c.output_dir = spec.output_dir();
    const auto& d = spec.data();
    c.train_files.assign(d.train_files().begin(), d.train_files().end());
    c.train_weights.assign(d.train_weights().begin(), d.train_weights().end());
    c.eval_files.assign(d.eval_files().begin(), d.eval_files().end());
    c.format = d.format() == v1::DATA_FORMAT_CHAT        ? DatasetFormat::kChat
               : d.format() == v1::DATA_FORMAT_TOKENIZED ? DatasetFormat::kPretokenized
                                                         : DatasetFormat::kAuto;
    c.bad_lines = d.bad_lines() == v1::BAD_LINE_POLICY_SKIP ? BadLinePolicy::kSkipAndCount
                                                            : BadLinePolicy::kFail;
    c.overlong = d.overlong() == v1::OVERLONG_POLICY_TRUNCATE ? OverlongPolicy::kTruncate
                 : d.overlong() == v1::OVERLONG_POLICY_DROP   ? OverlongPolicy::kDrop
                                                              : OverlongPolicy::kSplit;
    c.tokenizer = d.tokenizer();
    c.chat_template = d.chat_template();
    c.shuffle_window = d.shuffle_window();
    c.max_document_bytes = d.max_document_bytes();
    c.max_document_tokens = d.max_document_tokens();
    const auto& h = spec.hyperparameters();
    c.max_steps = h.max_steps();
    c.num_epochs = h.num_epochs();
    c.warmup_ratio = h.warmup_ratio();
    c.tokens_per_batch = h.tokens_per_batch();
    c.grad_accum = h.gradient_accumulation();
    c.max_grad_norm = h.max_grad_norm();
    c.lr.peak = h.learning_rate();
    c.lr.warmup_steps = h.warmup_steps();
    c.lr.min_lr_ratio = h.min_lr_ratio();
    c.lr.kind = h.lr_schedule() == v1::LR_SCHEDULE_LINEAR     ? LrScheduleKind::kLinear
                : h.lr_schedule() == v1::LR_SCHEDULE_CONSTANT ? LrScheduleKind::kConstant
                                                              : LrScheduleKind::kCosine;
    c.adamw.weight_decay = h.weight_decay();
    c.adamw.beta1 = h.beta1();
    c.adamw.beta2 = h.beta2();
    c.adamw.eps = h.eps();
    c.eval_every = spec.eval_every_n_steps();
    c.early_stopping.patience = spec.early_stopping().patience();
    c.early_stopping.min_delta = spec.early_stopping().min_delta();
    c.gpu.fp8_projections = spec.precision().projections() == "fp8";
    c.checkpoint_every = spec.checkpoint().every_n_steps();
    c.keep_last_n = spec.checkpoint().keep_last_n();
    c.seed = spec.seed();
    if (spec.adapter().type() == "lora") {  // validated: known modules
        c.lora = lora_spec_from(spec.adapter());
        c.lora_merged_export = spec.adapter().export_() == "merged";
    }
    // "jobs/ID" hands over that job's output_dir (its checkpoints are this job's now); a folder
    // is a checkpoint to start from.
    if (spec.resume_from().rfind("jobs/", 0) != 0) c.resume_checkpoint = spec.resume_from();
    return c;
}

}  // namespace deltatune
