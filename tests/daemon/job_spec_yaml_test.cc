// job_spec_to_yaml, the inverse of parse_job_yaml: parse -> normalize -> YAML -> parse ->
// normalize gives the same JobSpec for the shipped job files, a spec with every field set
// (filled by reflection, so a field added to job.proto is covered), explicit zeros and every enum
// value; every field is written, defaults explicit; `deltatune get --output yaml` prints it.
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>

#include "daemon/config/job_spec_yaml.h"
#include "daemon/config/job_yaml.h"
#include "tests/common/test_util.h"
#include "tests/daemon/daemon_test_util.h"

namespace deltatune::daemon::testing {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;
using Catch::Contains;

v1::JobSpec parse_normalized(const std::string& yaml) {
    absl::StatusOr<ParsedJobSpec> p = parse_job_yaml(yaml, InputLimits{});
    INFO(yaml);
    INFO(p.status().message());
    REQUIRE(p.ok());
    normalize_job_spec(&p->spec, &p->present);
    return p->spec;
}

// `spec` (normalized) -> YAML -> parse -> normalize is `spec` again; the difference if not.
void check_round_trip(const v1::JobSpec& spec) {
    const std::string yaml = job_spec_to_yaml(spec);
    INFO(yaml);
    const v1::JobSpec back = parse_normalized(yaml);
    const bool equal = pb::util::MessageDifferencer::Equals(spec, back);
    std::string diff;
    if (!equal) {
        pb::util::MessageDifferencer d;
        d.ReportDifferencesToString(&diff);
        d.Compare(spec, back);
    }
    INFO(diff);
    CHECK(equal);
}

// Strings YAML must quote or escape, or that read as another type unquoted.
const char* const kStrings[] = {
    "a: b",  "say \"hi\"\nnext line", "ünïcödé ✓ 日本", "null", "true", "0.5", "- dash",
    "#hash", " lead and trail ",      "it's, [x] {y}"};
const double kDoubles[] = {1e-5, 0.1, 3e-4, 0.95, 1.0 / 3, 6.02214076e23, 2.5, -0.75};

// One non-default value for field `f` of `m` (appended when repeated); `k` tells entries apart.
void set_value(pb::Message* m, const FD* f, int k) {
    const pb::Reflection* r = m->GetReflection();
    const bool rep = f->is_repeated();
    const int n = f->number() + k;
    switch (f->cpp_type()) {
        case FD::CPPTYPE_STRING: {
            const std::string s = kStrings[n % std::size(kStrings)];
            rep ? r->AddString(m, f, s) : r->SetString(m, f, s);
            break;
        }
        case FD::CPPTYPE_INT32:
            rep ? r->AddInt32(m, f, 3 * n + 1) : r->SetInt32(m, f, 3 * n + 1);
            break;
        case FD::CPPTYPE_INT64:
            rep ? r->AddInt64(m, f, 7 * n + 2) : r->SetInt64(m, f, 7 * n + 2);
            break;
        case FD::CPPTYPE_UINT64:
            rep ? r->AddUInt64(m, f, 18446744073709551615ull - n)
                : r->SetUInt64(m, f, 18446744073709551615ull - n);
            break;
        case FD::CPPTYPE_DOUBLE: {
            const double v = kDoubles[n % std::size(kDoubles)];
            rep ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
            break;
        }
        case FD::CPPTYPE_BOOL:
            rep ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
            break;
        case FD::CPPTYPE_ENUM: {
            const pb::EnumDescriptor* e = f->enum_type();
            const pb::EnumValueDescriptor* v = e->value(e->value_count() - 1 - k % 2);
            rep ? r->AddEnum(m, f, v) : r->SetEnum(m, f, v);
            break;
        }
        default:
            FAIL("job_spec_yaml_test: no value for " << f->full_name());
    }
}

// Every field of `m`, recursively, set to a value normalize_job_spec keeps; lists and maps get
// two entries (so data.train_files and data.train_weights pair up).
void fill_all(pb::Message* m) {
    const pb::Descriptor* d = m->GetDescriptor();
    const pb::Reflection* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
        const FD* f = d->field(i);
        for (int k = 0; k < (f->is_repeated() ? 2 : 1); ++k) {
            if (f->is_map()) {
                pb::Message* entry = r->AddMessage(m, f);
                set_value(entry, entry->GetDescriptor()->map_key(), k);
                set_value(entry, entry->GetDescriptor()->map_value(), k);
            } else if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
                fill_all(f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f));
            } else {
                set_value(m, f, k);
            }
        }
    }
}

v1::JobSpec filled_spec() {
    v1::JobSpec spec;
    fill_all(&spec);
    v1::JobSpec normalized = spec;
    normalize_job_spec(&normalized);
    INFO("normalize_job_spec changed a filled field: fill_all must pick values it keeps");
    REQUIRE(pb::util::MessageDifferencer::Equals(spec, normalized));
    return spec;
}

TEST_CASE("every job file in configs/jobs round-trips through job_spec_to_yaml", "[yaml]") {
    int files = 0;
    for (const auto& e :
         std::filesystem::directory_iterator(::deltatune::testing::source_path("configs/jobs"))) {
        if (e.path().extension() != ".yaml") continue;
        INFO(e.path().string());
        std::ifstream in(e.path());
        std::stringstream text;
        text << in.rdbuf();
        check_round_trip(parse_normalized(text.str()));
        ++files;
    }
    CHECK(files >= 3);
}

TEST_CASE("a spec with every field set round-trips, and every field is a key", "[yaml]") {
    const v1::JobSpec spec = filled_spec();
    check_round_trip(spec);
    // Walks the descriptor beside the YAML: a field the writer skipped fails here.
    const YAML::Node root = YAML::Load(job_spec_to_yaml(spec));
    std::function<void(const pb::Descriptor*, const YAML::Node&, const std::string&)> walk =
        [&](const pb::Descriptor* d, const YAML::Node& node, const std::string& path) {
            REQUIRE(node.IsMap());
            for (int i = 0; i < d->field_count(); ++i) {
                const FD* f = d->field(i);
                INFO(path + f->name());
                if (f->full_name() == "deltatune.v1.DataSpec.train_weights") {
                    CHECK(node["train_files"][0]["weight"].IsDefined());  // {path, weight}
                    CHECK(!node["train_weights"].IsDefined());
                    continue;
                }
                const YAML::Node value = node[f->name()];
                CHECK(value.IsDefined());
                if (!value.IsDefined() || f->is_map() || f->cpp_type() != FD::CPPTYPE_MESSAGE) {
                    continue;
                }
                walk(f->message_type(), f->is_repeated() ? value[0] : value,
                     path + f->name() + ".");
            }
        };
    walk(v1::JobSpec::descriptor(), root, "");
}

TEST_CASE("every value of every enum field round-trips by its short name", "[yaml]") {
    v1::JobSpec spec = filled_spec();
    int checked = 0;
    std::function<void(pb::Message*)> each = [&](pb::Message* m) {
        const pb::Descriptor* d = m->GetDescriptor();
        for (int i = 0; i < d->field_count(); ++i) {
            const FD* f = d->field(i);
            if (f->is_repeated()) continue;
            if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
                each(m->GetReflection()->MutableMessage(m, f));
            } else if (f->cpp_type() == FD::CPPTYPE_ENUM) {
                for (int v = 0; v < f->enum_type()->value_count(); ++v) {
                    INFO(f->full_name() << " = " << f->enum_type()->value(v)->name());
                    m->GetReflection()->SetEnum(m, f, f->enum_type()->value(v));
                    check_round_trip(spec);  // value 0 too: given explicitly, kept
                    ++checked;
                }
            }
        }
    };
    each(&spec);
    CHECK(checked >= 12);
}

const char* kExplicit = R"(
display_name: "quote \" and colon: here"
model: /models/qwen3.5-0.8b
data:
  train_files: [{path: a.jsonl, weight: 2}, b.jsonl, {path: "c: d.jsonl", weight: 0.5}]
  eval_files: [e.jsonl]
  format: tokenized
  bad_lines: skip
  overlong: truncate
output_dir: "out\nwith a newline"
hyperparameters:
  learning_rate: 3e-4
  lr_schedule: linear
  min_lr_ratio: 0
  weight_decay: 0.1
  beta1: 0
  eps: 1e-5
  max_grad_norm: 0
  max_steps: 100
checkpoint: {keep_last_n: 0}
resources: {gpus: 2, cpu_ranks: 0}
seed: 18446744073709551615
priority: -3
labels: {team: "nlp: core", note: "line1\nline2", "ünï": "✓ 日本", "null": "~"}
max_restarts: 0
kernels: {allow_non_fused: [swiglu, linear]}
adapter: {type: lora, rank: 8, alpha: 16, target_modules: [q_proj], use_rslora: true}
)";

TEST_CASE("explicit zeros, weights, labels and awkward strings survive the round trip", "[yaml]") {
    const v1::JobSpec spec = parse_normalized(kExplicit);
    check_round_trip(spec);
    const std::string yaml = job_spec_to_yaml(spec);
    INFO(yaml);
    CHECK_THAT(yaml, Contains("- {path: a.jsonl, weight: 2}"));
    CHECK_THAT(yaml, Contains("- {path: b.jsonl, weight: 1}"));
    CHECK_THAT(yaml, !Contains("train_weights"));
    CHECK_THAT(yaml, Contains("lr_schedule: linear") && Contains("overlong: truncate"));
    CHECK_THAT(yaml, Contains("learning_rate: 3e-04") && Contains("weight_decay: 0.1"));
    CHECK_THAT(yaml, Contains("max_grad_norm: 0\n") && Contains("max_restarts: 0\n"));
    const v1::JobSpec back = parse_normalized(yaml);
    CHECK(back.hyperparameters().has_max_grad_norm());
    CHECK(back.hyperparameters().max_grad_norm() == 0);
    CHECK(back.hyperparameters().beta1() == 0);
    CHECK(back.max_restarts() == 0);
    CHECK(back.checkpoint().keep_last_n() == 0);
    CHECK(back.data().train_weights_size() == 3);
    CHECK(back.labels().at("null") == "~");
    CHECK(back.display_name() == "quote \" and colon: here");
}

TEST_CASE("a normalized minimal spec's YAML states the defaults, unset messages as null",
          "[yaml]") {
    const v1::JobSpec spec = parse_normalized(
        "model: m\noutput_dir: o\ndata: {train_files: [t.jsonl]}\n"
        "hyperparameters: {max_steps: 10}\n");
    check_round_trip(spec);
    const std::string yaml = job_spec_to_yaml(spec);
    INFO(yaml);
    for (const char* want :
         {"beta2: 0.95\n", "keep_last_n: 2\n", "learning_rate: 1e-05\n", "lr_schedule: cosine\n",
          "min_lr_ratio: 0.1\n", "max_grad_norm: 1\n", "tokens_per_batch: 8192\n",
          "max_restarts: 3\n", "cpu_ranks: 1\n", "tokenizer: m\n", "bad_lines: fail\n",
          "format: unspecified\n", "labels: {}\n", "display_name: \"\"\n", "eval_files: []\n",
          "adapter: null  # not set\n", "kernels: null  # not set\n"}) {
        CHECK_THAT(yaml, Contains(want));
    }
    CHECK_THAT(yaml, Catch::StartsWith("display_name:"));  // job.proto's order
}

TEST_CASE("deltatune get --output yaml prints the stored spec; other commands refuse yaml",
          "[yaml][cli]") {
    TempDir dir;
    TestDaemon d(test_config(dir), /*start=*/false);  // the job stays QUEUED
    v1::JobSpec spec = fake_spec("yaml-out");
    (*spec.mutable_labels())["note"] = "a: \"b\"\nc ✓";
    spec.mutable_hyperparameters()->set_learning_rate(3e-4);
    spec.mutable_hyperparameters()->set_max_grad_norm(0);
    Job job;
    const grpc::Status created = create(d, spec, &job);
    INFO(created.error_message());
    REQUIRE(created.ok());
    const std::string cli = ::deltatune::testing::cli_path();
    const std::string at = " --address " + d.address();
    std::string out;
    REQUIRE(::deltatune::testing::run_command(
                cli + " get " + job.name() + " --output yaml" + at + " 2>/dev/null", out) == 0);
    const v1::JobSpec stored = get(d, job.name()).spec();
    CHECK(job_spec_to_yaml(stored) == out);
    INFO(out);
    v1::JobSpec again = parse_normalized(out);
    CHECK(pb::util::MessageDifferencer::Equals(again, stored));
    // It submits again, given an output_dir of its own (the first job owns the old one).
    again.set_output_dir("yaml-again");
    std::ofstream(dir.file("again.yaml")) << job_spec_to_yaml(again);
    CHECK(::deltatune::testing::run_command(
              cli + " submit " + dir.file("again.yaml") + at + " 2>&1", out) == 0);
    INFO(out);
    CHECK_THAT(out, Catch::StartsWith("jobs/"));
    CHECK(::deltatune::testing::run_command(cli + " list --output yaml" + at + " 2>&1", out) == 2);
    CHECK(out == "deltatune list: --output yaml applies to get only\n");
    CHECK(::deltatune::testing::run_command(
              cli + " cancel " + job.name() + " --output yaml" + at + " 2>&1", out) == 2);
    CHECK(out == "deltatune cancel: --output yaml applies to get only\n");
    CHECK(get(d, job.name()).state() == Job::QUEUED);  // refused before any call
    CHECK(::deltatune::testing::run_command(
              cli + " get " + job.name() + " --output xml" + at + " 2>&1", out) == 2);
    CHECK(out == "deltatune get: --output: expected text, json or yaml, got 'xml'\n");
}

}  // namespace
}  // namespace deltatune::daemon::testing
