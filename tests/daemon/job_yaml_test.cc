// Job YAML and daemon config loading: field names identical to the proto, unknown
// keys rejected with their path, bounds on size, depth and lists, documented defaults, cross-field
// rules quoting values (paths beneath the roots: job_validate_test.cc).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "daemon/config/daemon_config.h"
#include "daemon/config/job_yaml.h"
#include "runtime/model/kernel_registry.h"
#include "runtime/model/qwen35_config.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

using deltatune::testing::TempDir;
namespace fs = std::filesystem;

const char* kJob = R"(
display_name: tiny sft
model: tiny
data:
  train_files: [train.jsonl]
  format: chat
  bad_lines: skip
output_dir: run1
hyperparameters:
  learning_rate: 2e-5
  lr_schedule: linear
  max_steps: 100
  min_lr_ratio: 0
resources: {gpus: 0, cpu_ranks: 2}
labels: {team: nlp}
max_restarts: 0
)";

std::string message(const absl::Status& s) {
    return std::string(s.message());
}

TEST_CASE("a job YAML maps onto JobSpec with enums by short name", "[daemon][yaml]") {
    auto parsed = parse_job_yaml(kJob, InputLimits{});
    REQUIRE(parsed.ok());
    const v1::JobSpec& s = parsed->spec;
    CHECK(s.display_name() == "tiny sft");
    CHECK(s.data().format() == v1::DATA_FORMAT_CHAT);
    CHECK(s.data().bad_lines() == v1::BAD_LINE_POLICY_SKIP);
    CHECK(s.hyperparameters().lr_schedule() == v1::LR_SCHEDULE_LINEAR);
    CHECK(s.hyperparameters().learning_rate() == Approx(2e-5));
    CHECK(s.resources().cpu_ranks() == 2);
    CHECK(s.labels().at("team") == "nlp");
    CHECK(parsed->present.count("hyperparameters.min_lr_ratio") == 1);

    v1::JobSpec n = parsed->spec;
    normalize_job_spec(&n, &parsed->present);
    CHECK(n.hyperparameters().min_lr_ratio() == 0);  // explicit zero kept
    CHECK(n.max_restarts() == 0);
    CHECK(n.hyperparameters().beta2() == Approx(0.95));
    CHECK(n.hyperparameters().tokens_per_batch() == 8192);
    CHECK(n.checkpoint().keep_last_n() == 2);
    CHECK(n.data().tokenizer() == "tiny");
    v1::JobSpec api = parsed->spec;  // over gRPC, a plain proto3 zero means "default"...
    normalize_job_spec(&api);
    CHECK(api.max_restarts() == 3);
    CHECK(api.hyperparameters().min_lr_ratio() == 0);  // ...unless the field is `optional`
    api.mutable_hyperparameters()->clear_min_lr_ratio();
    normalize_job_spec(&api);
    CHECK(api.hyperparameters().min_lr_ratio() == Approx(0.1));
    CHECK(validate_job_spec(n, InputLimits{}).ok());
}

TEST_CASE("every job file in configs/jobs loads, normalizes and validates", "[daemon][yaml]") {
    const fs::path dir = deltatune::testing::source_path("configs/jobs");
    int files = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".yaml") continue;
        ++files;
        std::ifstream in(entry.path());
        const std::string text((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        auto parsed = parse_job_yaml(text, InputLimits{});
        INFO(entry.path().string());
        REQUIRE(parsed.ok());
        normalize_job_spec(&parsed->spec, &parsed->present);
        CHECK(validate_job_spec(parsed->spec, InputLimits{}).ok());
    }
    CHECK(files >= 1);
}

TEST_CASE("unknown keys and wrong types are rejected with their path", "[daemon][yaml]") {
    auto check = [](const std::string& yaml, const std::string& want) {
        auto parsed = parse_job_yaml(yaml, InputLimits{});
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
        CHECK_THAT(message(parsed.status()), Catch::Contains(want));
    };
    check("hyperparameters:\n  learnig_rate: 1e-5\n", "hyperparameters.learnig_rate: unknown key");
    check("modle: x\n", "modle: unknown key");
    check("data:\n  train_files: [a, [b]]\n", "data.train_files[1]: expected a string");
    check("hyperparameters: {max_steps: ten}\n", "hyperparameters.max_steps: expected an integer");
    check("hyperparameters: {max_steps: 99999999999999999999}\n", "out of range");
    check("hyperparameters: {lr_schedule: wavy}\n", "LR_SCHEDULE_COSINE");
    check("model: a\nmodel: b\n", "model: duplicate key");
    check("- just\n- a list\n", "expected a mapping");
    check("model: [unclosed\n", "INVALID_CONFIG");
}

TEST_CASE("hostile YAML: size, depth, list length and alias bombs are bounded", "[daemon][yaml]") {
    InputLimits limits;
    limits.max_request_bytes = 1 << 16;
    auto big = parse_job_yaml(std::string(1 << 17, '#'), limits);
    CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);

    std::string deep = "labels: ";
    for (int i = 0; i < 200; ++i) deep += "{a: ";
    deep += "1" + std::string(200, '}');
    auto d = parse_job_yaml(deep, limits);
    CHECK_THAT(message(d.status()), Catch::Contains("max_yaml_depth"));

    std::string list = "data:\n  train_files:\n";
    for (int i = 0; i < 1500; ++i) list += "  - f" + std::to_string(i) + "\n";
    CHECK_THAT(message(parse_job_yaml(list, limits).status()), Catch::Contains("max_list_length"));

    std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'h'; ++c) {
        const std::string prev(1, static_cast<char>(c - 1));
        bomb += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" +
                prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
    }
    CHECK_THAT(message(parse_job_yaml(bomb, limits).status()), Catch::Contains("YAML nodes"));
    // 10,000 levels once reached yaml-cpp's own limit first; the limit's message comes first now.
    const std::string abyss = "model: " + std::string(10000, '[') + std::string(10000, ']') + "\n";
    CHECK_THAT(message(parse_job_yaml(abyss, limits).status()),
               Catch::Contains("nesting deeper than max_yaml_depth (32)"));
    CHECK_THAT(message(parse_job_yaml("model: a\n---\nmodel: b\n", limits).status()),
               Catch::Contains("holds 2 YAML documents; one job per file"));
}

TEST_CASE("an explicit zero over gRPC is refused, not made the default", "[daemon][yaml]") {
    v1::JobSpec spec;
    spec.set_model("m");
    spec.set_output_dir("o");
    spec.mutable_data()->add_train_files("t");
    spec.mutable_hyperparameters()->set_max_steps(10);
    spec.mutable_hyperparameters()->set_tokens_per_batch(0);
    normalize_job_spec(&spec);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("hyperparameters.tokens_per_batch (0) must be in [16, 16777216]"));
    spec.mutable_hyperparameters()->clear_tokens_per_batch();
    normalize_job_spec(&spec);
    CHECK(spec.hyperparameters().tokens_per_batch() == 8192);
    // An enum number the API does not name is refused, not read as the default.
    spec.mutable_data()->set_overlong(static_cast<v1::OverlongPolicy>(7));
    CHECK(message(validate_job_spec(spec, InputLimits{})) ==
          "INVALID_CONFIG: data.overlong: unknown OverlongPolicy value 7");
    spec.mutable_data()->set_overlong(v1::OVERLONG_POLICY_DROP);
    CHECK(validate_job_spec(spec, InputLimits{}).ok());
}

TEST_CASE("data.overlong reads split, truncate or drop", "[daemon][yaml]") {
    CHECK(parse_job_yaml("data: {overlong: truncate}\n", InputLimits{})->spec.data().overlong() ==
          v1::OVERLONG_POLICY_TRUNCATE);
    CHECK_THAT(message(parse_job_yaml("model: m\ndata: {overlong: cut}\n", InputLimits{}).status()),
               Catch::Contains("data.overlong: expected one of OVERLONG_POLICY_SPLIT, "
                               "OVERLONG_POLICY_TRUNCATE, OVERLONG_POLICY_DROP, got 'cut'"));
}

TEST_CASE("train_files entries are paths or {path, weight}: a mixture", "[daemon][yaml]") {
    auto parsed = parse_job_yaml(
        "model: m\noutput_dir: o\nhyperparameters: {max_steps: 10}\n"
        "data: {train_files: [{path: a.jsonl, weight: 2.5}, b.jsonl, {weight: 0.5, path: "
        "c.jsonl}]}\n",
        InputLimits{});
    REQUIRE(parsed.ok());
    const v1::DataSpec& d = parsed->spec.data();
    REQUIRE(d.train_files_size() == 3);
    CHECK(d.train_files(2) == "c.jsonl");
    REQUIRE(d.train_weights_size() == 3);
    CHECK(d.train_weights(0) == 2.5);
    CHECK(d.train_weights(1) == 1.0);
    CHECK(d.train_weights(2) == 0.5);
    normalize_job_spec(&parsed->spec, &parsed->present);
    CHECK(validate_job_spec(parsed->spec, InputLimits{}).ok());
    // Plain paths only: no weights at all.
    CHECK(parse_job_yaml("data: {train_files: [a, b]}\n", InputLimits{})
              ->spec.data()
              .train_weights_size() == 0);
    const std::pair<const char*, const char*> bad[] = {
        {"data: {train_files: [{path: a, wieght: 2}]}\n",
         "data.train_files[0].wieght: unknown or repeated key"},
        {"data: {train_files: [{weight: 2}]}\n", "data.train_files[0]: no path"},
        {"data: {train_files: [{path: a, weight: lots}]}\n",
         "data.train_files[0].weight: expected a number, got 'lots'"},
        {"data: {train_weights: [1], train_files: [{path: a, weight: 2}]}\n",
         "weights given both in the entries and in data.train_weights"},
    };
    for (const auto& [yaml, want] : bad) {
        INFO(yaml);
        CHECK_THAT(message(parse_job_yaml(yaml, InputLimits{}).status()), Catch::Contains(want));
    }
    v1::JobSpec spec = parsed->spec;
    spec.mutable_data()->set_train_weights(1, 0.0);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("data.train_files[1] weight (0) must be in (0, 1000]"));
    spec.mutable_data()->add_train_weights(1.0);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("data.train_weights has 4 entries for 3 train files"));
}

TEST_CASE("adapter: LoRA with PEFT's knobs, defaults, and refusals", "[daemon][yaml]") {
    auto parsed = parse_job_yaml(
        "model: m\noutput_dir: o\ndata: {train_files: [t]}\nhyperparameters: {max_steps: 5}\n"
        "adapter: {type: lora}\n",
        InputLimits{});
    REQUIRE(parsed.ok());
    normalize_job_spec(&parsed->spec, &parsed->present);
    const v1::AdapterSpec& a = parsed->spec.adapter();
    CHECK(a.rank() == 16);
    CHECK(a.alpha() == 32);
    CHECK(a.target_modules_size() == 12);  // every projection
    CHECK(validate_job_spec(parsed->spec, InputLimits{}).ok());
    // Without an adapter nothing of it appears in the spec.
    auto plain = parse_job_yaml("model: m\n", InputLimits{});
    normalize_job_spec(&plain->spec, &plain->present);
    CHECK(plain->spec.adapter().ByteSizeLong() == 0);
    const std::pair<std::function<void(v1::AdapterSpec*)>, const char*> bad[] = {
        {[](v1::AdapterSpec* x) { x->set_type("ia3"); }, "adapter.type ('ia3') must be lora"},
        {[](v1::AdapterSpec* x) { x->set_rank(0); }, "adapter.rank (0) must be in [1, 1024]"},
        {[](v1::AdapterSpec* x) { x->set_alpha(-1); }, "adapter.alpha (-1) must be a positive"},
        {[](v1::AdapterSpec* x) { x->set_dropout(0.1); }, "only 0 is supported so far"},
        {[](v1::AdapterSpec* x) { x->add_target_modules("lm_head"); },
         "unknown LoRA target module 'lm_head' (valid: q_proj"},
        {[](v1::AdapterSpec* x) { x->set_type(""); }, "adapter: type is required"},
        {[](v1::AdapterSpec* x) { x->set_export_("gguf"); },
         "adapter.export ('gguf') must be peft or merged"},
    };
    for (const auto& [edit, want] : bad) {
        INFO(want);
        v1::JobSpec spec = parsed->spec;
        edit(spec.mutable_adapter());
        CHECK_THAT(message(validate_job_spec(spec, InputLimits{})), Catch::Contains(want));
    }
    v1::JobSpec gpu = parsed->spec;  // LoRA on GPU ranks is accepted as well
    gpu.mutable_resources()->set_gpus(1);
    gpu.mutable_resources()->set_cpu_ranks(0);
    CHECK(validate_job_spec(gpu, InputLimits{}).ok());
}

TEST_CASE("cross-field rules quote the values", "[daemon][yaml]") {
    auto parsed = parse_job_yaml(
        "model: m\noutput_dir: o\ndata: {train_files: [t]}\n"
        "hyperparameters: {max_steps: 100, warmup_steps: 500}\n",
        InputLimits{});
    REQUIRE(parsed.ok());
    normalize_job_spec(&parsed->spec, &parsed->present);
    const absl::Status s = validate_job_spec(parsed->spec, InputLimits{});
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(message(s) ==
          "INVALID_CONFIG: hyperparameters.warmup_steps (500) must be in [0, "
          "hyperparameters.max_steps (100)]");
    v1::JobSpec spec = parsed->spec;
    spec.mutable_hyperparameters()->set_warmup_steps(0);
    spec.mutable_resources()->set_gpus(2);
    spec.mutable_resources()->set_cpu_ranks(1);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("resources.cpu_ranks (1) applies only when resources.gpus is 0"));
    spec.mutable_resources()->set_cpu_ranks(0);
    spec.mutable_resources()->set_nodes(4);  // 2 GPUs cannot be spread evenly over 4 nodes
    CHECK(message(validate_job_spec(spec, InputLimits{})) ==
          "INVALID_CONFIG: resources.gpus (2) must be a multiple of resources.nodes (4): every "
          "node runs the same number of ranks");
    spec.mutable_resources()->set_nodes(65);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("resources.nodes (65) must be in [0, 64]"));
    spec.mutable_resources()->set_nodes(2);
    CHECK(validate_job_spec(spec, InputLimits{}).ok());
    spec.mutable_resources()->set_nodes(0);
    spec.set_eval_every_n_steps(10);
    CHECK_THAT(message(validate_job_spec(spec, InputLimits{})),
               Catch::Contains("eval_every_n_steps (10) needs data.eval_files"));
}

TEST_CASE("hyperparameters must be finite and in range", "[daemon][yaml][security]") {
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    auto refused = [](void (v1::Hyperparameters::*set)(double), double value,
                      const std::string& field) {
        v1::JobSpec spec;
        spec.set_model("m");
        spec.set_output_dir("o");
        spec.mutable_data()->add_train_files("t");
        spec.mutable_hyperparameters()->set_max_steps(10);
        (spec.mutable_hyperparameters()->*set)(value);
        normalize_job_spec(&spec);
        const absl::Status s = validate_job_spec(spec, InputLimits{});
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK_THAT(message(s), Catch::StartsWith("INVALID_CONFIG: hyperparameters." + field) &&
                                   Catch::Contains("must be a finite number in"));
    };
    using H = v1::Hyperparameters;
    for (double bad : {nan, inf, -inf}) {
        refused(&H::set_learning_rate, bad, "learning_rate");
        refused(&H::set_weight_decay, bad, "weight_decay");
        refused(&H::set_eps, bad, "eps");
        refused(&H::set_beta1, bad, "beta1");
        refused(&H::set_beta2, bad, "beta2");
        refused(&H::set_min_lr_ratio, bad, "min_lr_ratio");
        refused(&H::set_max_grad_norm, bad, "max_grad_norm");
    }
    refused(&H::set_weight_decay, -0.1, "weight_decay");
    refused(&H::set_beta2, 1.0, "beta2");
}

TEST_CASE("GPU job admission: GPU count, then strict kernels", "[daemon][yaml]") {
    v1::JobSpec s;
    s.set_model(deltatune::testing::source_path("tests/fixtures/parity/tiny-a"));
    s.mutable_resources()->set_gpus(2);
    s.mutable_hyperparameters()->set_tokens_per_batch(256);
    const int64_t gpu_bytes = int64_t{141} << 30;
    const absl::Status too_many = check_job_memory(s, gpu_bytes, 1);
    CHECK(too_many.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(message(too_many),
               Catch::StartsWith("GPUS_UNAVAILABLE: resources.gpus (2) exceeds the 1 GPU(s)"));
    // With the GPUs there, every op must run its fused kernel on this machine (no GPU here: the
    // CPU reference for every op) unless the job names it.
    auto config = load_qwen35_config(s.model() + "/config.json");
    REQUIRE(config.ok());
    std::vector<std::string> slow;
    for (const auto& k : kernel_registry_for(probe_machine(), &*config).ops) {
        if (k.kind != KernelKind::kFused && k.kind != KernelKind::kLibrary) slow.push_back(k.op);
    }
    const absl::Status strict = check_job_memory(s, gpu_bytes, 2);
    if (slow.empty()) {
        CHECK(strict.ok());
    } else {
        CHECK(strict.code() == absl::StatusCode::kFailedPrecondition);
        CHECK_THAT(message(strict), Catch::StartsWith("NON_FUSED_KERNEL: strict mode: ") &&
                                        Catch::Contains(slow.front() + " -> "));
    }
    for (const auto& op : slow) s.mutable_kernels()->add_allow_non_fused(op);
    CHECK(check_job_memory(s, gpu_bytes, 2).ok());
    s.mutable_kernels()->add_allow_non_fused("flash_attn");
    const absl::Status unknown = check_job_memory(s, gpu_bytes, 2);
    CHECK(unknown.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(message(unknown), Catch::Contains("unknown op 'flash_attn'; the ops are linear, "));
    // Placed on node agents, a GPU job is not refused for this machine's GPU count, and where
    // this machine has no GPU its kernels are judged by the ranks on the agents' machines.
    s.mutable_kernels()->clear_allow_non_fused();
    s.mutable_resources()->set_nodes(2);
    const absl::Status on_agents = check_job_memory(s, gpu_bytes, 0);
    if (probe_machine().gpu.sm_version == 0) {
        CHECK(on_agents.ok());
        CHECK_THAT(message(check_kernels_on(probe_machine(), *config, s)),
                   Catch::StartsWith("NON_FUSED_KERNEL: "));
    } else {
        CHECK(on_agents.ok() == slow.empty());
    }
    s.mutable_resources()->set_nodes(0);
    // CPU jobs are not GPU-admitted at all.
    s.mutable_resources()->set_gpus(0);
    CHECK(check_job_memory(s, gpu_bytes, 0).ok());
}

TEST_CASE("CPU jobs are admitted against the cores and memory", "[daemon][yaml]") {
    v1::JobSpec s;
    s.mutable_resources()->set_cpu_ranks(64);
    const CpuBudget budget{8, int64_t{24} << 30, int64_t{830} << 20};
    const absl::Status cores = check_cpu_admission(s, budget);
    CHECK(cores.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(message(cores) ==
          "CPUS_UNAVAILABLE: resources.cpu_ranks (64) exceeds the 8 cores of this daemon "
          "(scheduler.cpu_cores)");
    const absl::Status memory = check_cpu_admission(s, {64, int64_t{24} << 30, int64_t{830} << 20});
    CHECK(memory.code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(message(memory), Catch::StartsWith("MEMORY_PLAN: resources.cpu_ranks (64) x 0.81 "
                                                  "GiB per rank") &&
                                    Catch::Contains("more than the 24.00 GiB"));
    s.mutable_resources()->set_cpu_ranks(8);
    CHECK(check_cpu_admission(s, budget).ok());
    const CpuBudget here = cpu_budget(-1, -1, 1.0);
    CHECK(here.cores >= 1);
    CHECK(here.memory_bytes > (int64_t{256} << 20));
    CHECK(cpu_budget(3, 2.5, 0.5).memory_bytes == (int64_t{5} << 29));
}

TEST_CASE("daemon config: defaults, unknown keys with paths, safety checks", "[daemon][config]") {
    auto def = parse_daemon_config("");
    REQUIRE(def.ok());
    CHECK(def->grpc_address == "127.0.0.1:7070");
    CHECK(def->http_address == "127.0.0.1:9090");
    CHECK(def->max_concurrent_jobs == 1);
    CHECK(def->roots.data == std::vector<std::string>{"/var/lib/deltatune/data"});
    auto repo = load_daemon_config(deltatune::testing::source_path("configs/daemon.yaml"));
    REQUIRE(repo.ok());
    CHECK(repo->limits.max_request_bytes == 4194304);

    auto typo = parse_daemon_config("scheduler:\n  max_concurent_jobs: 2\n", "d.yaml");
    CHECK(message(typo.status()) == "d.yaml: scheduler.max_concurent_jobs: unknown key");
    auto open = parse_daemon_config("listen: {grpc: 0.0.0.0:7070}\n");
    CHECK_THAT(message(open.status()), Catch::Contains("set auth.token_file"));
    auto open_http = parse_daemon_config("listen: {http: 0.0.0.0:9090}\n");
    CHECK_THAT(message(open_http.status()),
               Catch::Contains("listen.http (0.0.0.0:9090) is not loopback; set auth.token_file"));
    auto tokened = parse_daemon_config("listen: {grpc: 0.0.0.0:7070}\nauth: {token_file: /t}\n");
    CHECK(tokened.ok());
    // A name that only starts like a loopback literal is not loopback.
    auto named = parse_daemon_config("listen: {grpc: 127.0.0.1.example.com:7070}\n");
    CHECK_THAT(message(named.status()), Catch::Contains("is not loopback; set auth.token_file"));
    for (const char* ok : {"127.0.0.1:0", "127.1.2.3:65535", "localhost:7070", "[::1]:7070",
                           "unix:/run/deltatune.sock"}) {
        INFO(ok);
        CHECK(parse_daemon_config(absl::StrCat("listen: {grpc: '", ok, "'}\n")).ok());
    }
    // gRPC would bind 99999 modulo 65536 (34463) and report 99999.
    auto port = parse_daemon_config("listen: {grpc: 127.0.0.1:99999}\n", "d.yaml");
    CHECK(message(port.status()) ==
          "d.yaml: listen.grpc (127.0.0.1:99999): port '99999' must be a number in [0, 65535]");
    auto http_port = parse_daemon_config("listen: {http: '127.0.0.1:-1'}\n");
    CHECK_THAT(message(http_port.status()),
               Catch::Contains("listen.http (127.0.0.1:-1): port '-1'"));
    for (const char* bad : {"7070", "127.0.0.1", "::1:7070", ":7070", "unix:"}) {
        INFO(bad);
        CHECK_THAT(
            message(parse_daemon_config(absl::StrCat("listen: {grpc: '", bad, "'}\n")).status()),
            Catch::StartsWith("daemon config: listen.grpc ("));
    }
    auto bad = parse_daemon_config("scheduler: {max_concurrent_jobs: 0}\n");
    CHECK_THAT(message(bad.status()), Catch::Contains("scheduler.max_concurrent_jobs (0)"));
    auto inside = parse_daemon_config("state_dir: /srv/dt/state\nroots: {outputs: [/srv/dt]}\n");
    CHECK_THAT(message(inside.status()),
               Catch::Contains("roots.outputs '/srv/dt' holds state_dir '/srv/dt/state'"));
    auto cpu = parse_daemon_config("scheduler: {cpu_cores: 4, cpu_rank_memory_gib: 0.5}\n");
    REQUIRE(cpu.ok());
    CHECK(cpu->cpu_cores == 4);
    CHECK(cpu->cpu_rank_memory_gib == 0.5);
    auto rel = parse_daemon_config("roots: {data: [data]}\n");
    CHECK_THAT(message(rel.status()), Catch::Contains("must be an absolute path"));
}

}  // namespace
}  // namespace deltatune::daemon
