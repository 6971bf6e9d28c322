// JobSpec -> TrainConfig: the defaults come from normalize_job_spec alone, and the mapping carries
// every field through unchanged (explicit zeros included).
#include <catch2/catch.hpp>

#include <cmath>

#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"

namespace deltatune {
namespace {

TrainConfig config_of(const char* yaml) {
    auto parsed = daemon::parse_job_yaml(yaml, daemon::InputLimits{});
    REQUIRE(parsed.ok());
    daemon::normalize_job_spec(&parsed->spec, &parsed->present);
    return train_config_from_spec(parsed->spec);
}

TEST_CASE("a minimal job's config holds the documented defaults", "[daemon][yaml]") {
    const TrainConfig c = config_of(R"(
model: m
output_dir: o
data: {train_files: [a.jsonl]}
hyperparameters: {max_steps: 7}
)");
    CHECK(c.max_steps == 7);
    CHECK(c.lr.peak == Approx(1e-5));
    CHECK(c.lr.kind == LrScheduleKind::kCosine);
    CHECK(c.lr.min_lr_ratio == Approx(0.1));
    CHECK(c.adamw.beta1 == Approx(0.9));
    CHECK(c.adamw.beta2 == Approx(0.95));
    CHECK(c.adamw.eps == Approx(1e-8));
    CHECK(c.max_grad_norm == Approx(1.0));
    CHECK(c.tokens_per_batch == 8192);
    CHECK(c.grad_accum == 1);
    CHECK(c.shuffle_window == 4096);
    CHECK(c.max_document_bytes == (int64_t{16} << 20));
    CHECK(c.max_document_tokens == (int64_t{1} << 20));
    CHECK(c.keep_last_n == 2);
    CHECK(c.bad_lines == BadLinePolicy::kFail);
    CHECK(c.overlong == OverlongPolicy::kSplit);
    CHECK(c.tokenizer == "m");  // the model folder's tokenizer
    CHECK_FALSE(c.gpu.fp8_projections);
}

TEST_CASE("explicit values, zeros included, map through unchanged", "[daemon][yaml]") {
    const TrainConfig c = config_of(R"(
model: m
output_dir: o
data: {train_files: [a.jsonl, {path: c.jsonl, weight: 0.5}], eval_files: [b.jsonl],
       format: tokenized, bad_lines: skip, overlong: drop}
hyperparameters:
  learning_rate: 2e-5
  lr_schedule: constant
  min_lr_ratio: 0
  max_grad_norm: 0
  max_steps: 9
  warmup_steps: 3
  tokens_per_batch: 1024
  gradient_accumulation: 4
checkpoint: {every_n_steps: 5, keep_last_n: 1}
eval_every_n_steps: 2
seed: 11
resume_from: ckpt/step-4
adapter: {type: lora, rank: 8, alpha: 4, target_modules: [q_proj, down_proj], use_rslora: true}
precision: {projections: fp8}
)");
    CHECK(c.lr.peak == Approx(2e-5));
    CHECK(c.lr.kind == LrScheduleKind::kConstant);
    CHECK(c.lr.min_lr_ratio == 0);
    CHECK(c.max_grad_norm == 0);  // clipping off
    CHECK(c.lr.warmup_steps == 3);
    CHECK(c.tokens_per_batch == 1024);
    CHECK(c.grad_accum == 4);
    CHECK(c.format == DatasetFormat::kPretokenized);
    CHECK(c.bad_lines == BadLinePolicy::kSkipAndCount);
    CHECK(c.overlong == OverlongPolicy::kDrop);
    CHECK(c.eval_files == std::vector<std::string>{"b.jsonl"});
    CHECK(c.train_files == std::vector<std::string>{"a.jsonl", "c.jsonl"});
    CHECK(c.train_weights == std::vector<double>{1.0, 0.5});
    CHECK(c.checkpoint_every == 5);
    CHECK(c.keep_last_n == 1);
    CHECK(c.eval_every == 2);
    CHECK(c.seed == 11);
    CHECK(c.resume_checkpoint == "ckpt/step-4");
    REQUIRE(c.lora.has_value());
    CHECK(c.lora->rank == 8);
    CHECK(c.lora->scale() == Approx(4 / std::sqrt(8.0)));
    CHECK(c.lora->targets == std::vector<Proj>{Proj::kQ, Proj::kDown});
    CHECK(c.gpu.fp8_projections);  // reaches the GPU ranks' options
}

}  // namespace
}  // namespace deltatune
