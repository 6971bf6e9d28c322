// What daemon/config/job_validate.cc checks: the cross-field rules on the training length, the
// warmup and early stopping, each refusal quoting the values; and the paths, resolved after
// symlinks beneath their roots, with the over-long default chosen from the data.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/config/job_yaml.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

using deltatune::testing::TempDir;
namespace fs = std::filesystem;

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

TEST_CASE("precision: bf16 or fp8 projections, fp8 on GPU ranks only", "[daemon][yaml]") {
    const std::string base = "data: {train_files: [t]}\nhyperparameters: {max_steps: 9}\n";
    CHECK(validate_yaml(base + "resources: {gpus: 1}\nprecision: {projections: fp8}\n") == "");
    CHECK(validate_yaml(base + "resources: {gpus: 1}\nprecision: {projections: bf16}\n") == "");
    CHECK(validate_yaml(base + "resources: {gpus: 1}\nprecision: {projections: fp4}\n") ==
          "INVALID_CONFIG: precision.projections ('fp4') must be bf16 or fp8");
    CHECK(validate_yaml(base +
                        "resources: {gpus: 0, cpu_ranks: 1}\nprecision: {projections: fp8}\n") ==
          "INVALID_CONFIG: precision.projections (fp8) needs GPU ranks (resources.gpus > 0)");
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

TEST_CASE("job paths must resolve, after symlinks, beneath their roots",
          "[daemon][yaml][security]") {
    TempDir dir;
    fs::create_directories(dir.file("models/m"));
    fs::create_directories(dir.file("data"));
    fs::create_directories(dir.file("data-evil"));
    fs::create_directories(dir.file("outputs"));
    std::ofstream(dir.file("data/t.jsonl")) << "{\"input_ids\": [1]}\n";
    std::ofstream(dir.file("data-evil/t.jsonl")) << "{\"input_ids\": [1]}\n";
    std::ofstream(dir.file("secret")) << "x";
    fs::create_symlink(dir.file("secret"), dir.file("data/link.jsonl"));
    fs::create_symlink(dir.file("data"), dir.file("outputs/to-data"));
    const PathRoots roots{{dir.file("models")}, {dir.file("data")}, {dir.file("outputs")}};
    auto spec_with = [&](const std::string& train, const std::string& out) {
        v1::JobSpec s;
        s.set_model("m");
        s.mutable_data()->add_train_files(train);
        s.set_output_dir(out);
        return s;
    };
    v1::JobSpec ok = spec_with("t.jsonl", "run/1");
    REQUIRE(resolve_job_paths(&ok, roots).ok());
    CHECK(ok.model() == fs::canonical(dir.file("models/m")).string());
    CHECK(ok.data().train_files(0) == fs::canonical(dir.file("data/t.jsonl")).string());
    CHECK(ok.output_dir() == fs::weakly_canonical(dir.file("outputs/run/1")).string());

    auto refused = [&](const std::string& train, const std::string& out) {
        v1::JobSpec s = spec_with(train, out);
        const absl::Status st = resolve_job_paths(&s, roots);
        CHECK(st.code() == absl::StatusCode::kInvalidArgument);
        CHECK_THAT(message(st), Catch::StartsWith("PATH_NOT_ALLOWED: "));
    };
    refused("../secret", "run");                    // .. escape
    refused(dir.file("secret"), "run");             // absolute path outside
    refused("link.jsonl", "run");                   // symlink escape
    refused(dir.file("data-evil/t.jsonl"), "run");  // prefix without the slash
    refused("t.jsonl", "run/../../data/x");         // output .. escape
    refused("t.jsonl", "to-data/x");                // output symlink escape
    refused("t.jsonl", ".");                        // the root itself
    // A component over NAME_MAX after a symlink to "/" cannot be resolved by the kernel; a
    // textual clean-up of the ".." after it would skip the symlink. Refused, for every field.
    fs::create_symlink("/", dir.file("data/rootlink"));
    fs::create_symlink("/", dir.file("outputs/rootlink"));
    const std::string too_long = "rootlink/" + std::string(300, 'x') + "/..";
    refused(too_long + "/etc/passwd", "run");
    refused("t.jsonl", too_long + "/tmp/escaped");
    refused("t.jsonl", "new/" + std::string(300, 'y'));  // a folder name the kernel refuses
    // Messages name the field and its roots, never where a path led.
    v1::JobSpec cwd = spec_with("/proc/self/cwd/t.jsonl", "run");
    const std::string why = message(resolve_job_paths(&cwd, roots));
    CHECK_THAT(why, Catch::StartsWith("PATH_NOT_ALLOWED: data.train_files[0]: "));
    CHECK_THAT(why, !Catch::Contains(fs::current_path().string() + "'"));
    // Over-long documents: truncated in conversations by default, split in other data; a
    // policy the spec names stays.
    CHECK(ok.data().overlong() == v1::OVERLONG_POLICY_SPLIT);  // tokenized
    std::ofstream(dir.file("data/chat.jsonl")) << "{\"messages\": []}\n";
    std::ofstream(dir.file("data/text.jsonl")) << "{\"text\": \"hi\"}\n";
    v1::JobSpec chat = spec_with("text.jsonl", "run/2");
    chat.mutable_data()->set_chat_template("qwen3_5");
    REQUIRE(resolve_job_paths(&chat, roots).ok());
    CHECK(chat.data().overlong() == v1::OVERLONG_POLICY_SPLIT);
    chat = spec_with("text.jsonl", "run/2");
    chat.mutable_data()->add_train_files("chat.jsonl");
    chat.mutable_data()->set_chat_template("qwen3_5");
    REQUIRE(resolve_job_paths(&chat, roots).ok());
    CHECK(chat.data().overlong() == v1::OVERLONG_POLICY_TRUNCATE);
    chat = spec_with("chat.jsonl", "run/2");
    chat.mutable_data()->set_chat_template("qwen3_5");
    chat.mutable_data()->set_overlong(v1::OVERLONG_POLICY_SPLIT);
    REQUIRE(resolve_job_paths(&chat, roots).ok());
    CHECK(chat.data().overlong() == v1::OVERLONG_POLICY_SPLIT);
    v1::JobSpec missing = spec_with("nope.jsonl", "run");
    CHECK_THAT(message(resolve_job_paths(&missing, roots)), Catch::StartsWith("DATASET_NOT_FOUND"));
}

}  // namespace
}  // namespace deltatune::daemon
