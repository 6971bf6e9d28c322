// The cross-field rules of a job spec (daemon/config/job_validate.cc) on the training length,
// the warmup and early stopping, each refusal quoting the values.
#include <catch2/catch.hpp>

#include <string>

#include "daemon/config/job_yaml.h"

namespace deltatune::daemon {
namespace {

std::string message(const absl::Status& s) {
    return std::string(s.message());
}

// Each case: the YAML after "model: m\noutput_dir: o\n", and the refusal ("" = valid).
std::string validate_yaml(const std::string& body) {
    auto parsed = parse_job_yaml("model: m\noutput_dir: o\n" + body, InputLimits{});
    if (!parsed.ok()) return message(parsed.status());
    normalize_job_spec(&parsed->spec, &parsed->present);
    return message(validate_job_spec(parsed->spec, InputLimits{}));
}

TEST_CASE("the length: max_steps or num_epochs; warmup: steps or a ratio", "[daemon][yaml]") {
    const std::string data = "data: {train_files: [t], eval_files: [e]}\n";
    CHECK(validate_yaml(data + "hyperparameters: {num_epochs: 2.5, warmup_ratio: 0.1}\n") == "");
    CHECK(validate_yaml(data + "hyperparameters: {max_steps: 10, num_epochs: 2}\n") ==
          "INVALID_CONFIG: hyperparameters: give one of max_steps (10) and num_epochs (2): the "
          "optimizer steps, or the passes over the data");
    CHECK(validate_yaml(data + "hyperparameters: {learning_rate: 1e-5}\n") ==
          "INVALID_CONFIG: hyperparameters: give one of max_steps (0) and num_epochs (0): the "
          "optimizer steps, or the passes over the data");
    CHECK(validate_yaml(data + "hyperparameters: {num_epochs: -1}\n") ==
          "INVALID_CONFIG: hyperparameters.num_epochs (-1) must be a finite number in [0, "
          "10000]");
    CHECK(validate_yaml(data + "hyperparameters: {max_steps: 9, warmup_ratio: 1.5}\n") ==
          "INVALID_CONFIG: hyperparameters.warmup_ratio (1.5) must be a finite number in [0, 1]");
    CHECK(validate_yaml(data + "hyperparameters: {max_steps: 9, warmup_ratio: 0.1, "
                               "warmup_steps: 2}\n") ==
          "INVALID_CONFIG: hyperparameters: give one of warmup_steps (2) and warmup_ratio (0.1)");
    // With epochs the steps are known once the data is packed: the rank checks the warmup.
    CHECK(validate_yaml(data + "hyperparameters: {num_epochs: 1, warmup_steps: 500}\n") == "");
}

TEST_CASE("early stopping needs evaluations to watch", "[daemon][yaml]") {
    const std::string steps = "hyperparameters: {max_steps: 100}\n";
    CHECK(validate_yaml(steps +
                        "data: {train_files: [t], eval_files: [e]}\neval_every_n_steps: 10\n"
                        "early_stopping: {patience: 3, min_delta: 0.001}\n") == "");
    CHECK(validate_yaml(steps + "data: {train_files: [t]}\nearly_stopping: {patience: 3}\n") ==
          "INVALID_CONFIG: early_stopping.patience (3) needs data.eval_files and "
          "eval_every_n_steps (0) > 0");
    CHECK(validate_yaml(steps + "data: {train_files: [t]}\nearly_stopping: {min_delta: 0.1}\n") ==
          "INVALID_CONFIG: early_stopping.min_delta (0.1) needs early_stopping.patience (> 0)");
    CHECK(validate_yaml(steps + "data: {train_files: [t]}\nearly_stopping: {patience: -1}\n") ==
          "INVALID_CONFIG: early_stopping.patience (-1) must be in [0, 1000]");
    CHECK(validate_yaml(steps + "data: {train_files: [t], eval_files: [e]}\n"
                                "eval_every_n_steps: 5\nearly_stopping: {patience: 2, "
                                "min_delta: -0.5}\n") ==
          "INVALID_CONFIG: early_stopping.min_delta (-0.5) must be >= 0");
}

}  // namespace
}  // namespace deltatune::daemon
