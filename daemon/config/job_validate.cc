// JobSpec cross-field rules and path confinement (declared in job_yaml.h). Every message quotes
// the offending values so a user can fix the file without reading code (torchtitan style).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/config/data_check.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_template_source.h"
#include "runtime/model/lora.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune::daemon {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxStringBytes = 4096;
constexpr int kMaxLabels = 64;
constexpr size_t kMaxSpecBytes = 256 << 10;

absl::Status invalid(const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat("INVALID_CONFIG: ", msg));
}

absl::Status check_string(const std::string& path, const std::string& v) {
    if (v.size() > kMaxStringBytes) {
        return invalid(absl::StrCat(path, " is ", v.size(), " bytes, more than ", kMaxStringBytes));
    }
    if (v.find('\0') != std::string::npos) return invalid(absl::StrCat(path, " contains a NUL"));
    return absl::OkStatus();
}

absl::Status check_list(const std::string& path,
                        const google::protobuf::RepeatedPtrField<std::string>& v,
                        const InputLimits& limits) {
    if (v.size() > limits.max_list_length) {
        return invalid(absl::StrCat(path, " has ", v.size(),
                                    " entries, more than max_list_length (", limits.max_list_length,
                                    ")"));
    }
    for (int i = 0; i < v.size(); ++i) {
        DT_RETURN_IF_ERROR(check_string(absl::StrCat(path, "[", i, "]"), v[i]));
    }
    return absl::OkStatus();
}

// `value` must be a finite number in [lo, hi] (an end excluded when its flag says so). NaN fails
// every comparison, so each bound is written as what must hold.
absl::Status check_range(const char* field, double value, double lo, bool lo_open, double hi,
                         bool hi_open) {
    const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                    (hi_open ? value < hi : value <= hi);
    if (ok) return absl::OkStatus();
    const std::string hi_text = std::isinf(hi) ? "inf" : absl::StrCat(hi);
    return invalid(absl::StrCat("hyperparameters.", field, " (", value,
                                ") must be a finite number in ", lo_open ? "(" : "[", lo, ", ",
                                hi_text, hi_open ? ")" : "]"));
}

absl::Status validate_hyperparameters(const v1::Hyperparameters& h) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (h.max_steps() < 0) {
        return invalid(absl::StrCat("hyperparameters.max_steps (", h.max_steps(), ") must be > 0"));
    }
    DT_RETURN_IF_ERROR(check_range("num_epochs", h.num_epochs(), 0, false, 10000, false));
    if ((h.max_steps() > 0) == (h.num_epochs() > 0)) {
        return invalid(absl::StrCat("hyperparameters: give one of max_steps (", h.max_steps(),
                                    ") and num_epochs (", h.num_epochs(),
                                    "): the optimizer steps, or the passes over the data"));
    }
    DT_RETURN_IF_ERROR(check_range("learning_rate", h.learning_rate(), 0, true, 1, false));
    DT_RETURN_IF_ERROR(check_range("warmup_ratio", h.warmup_ratio(), 0, false, 1, false));
    if (h.warmup_ratio() > 0 && h.warmup_steps() > 0) {
        return invalid(absl::StrCat("hyperparameters: give one of warmup_steps (", h.warmup_steps(),
                                    ") and warmup_ratio (", h.warmup_ratio(), ")"));
    }
    // With num_epochs the steps are known once the data is packed: the rank checks it then.
    const int64_t steps = h.max_steps() > 0 ? h.max_steps() : std::numeric_limits<int64_t>::max();
    if (h.warmup_steps() < 0 || h.warmup_steps() > steps) {
        return invalid(absl::StrCat("hyperparameters.warmup_steps (", h.warmup_steps(),
                                    ") must be in [0, hyperparameters.max_steps (", h.max_steps(),
                                    ")]"));
    }
    DT_RETURN_IF_ERROR(check_range("min_lr_ratio", h.min_lr_ratio(), 0, false, 1, false));
    DT_RETURN_IF_ERROR(check_range("beta1", h.beta1(), 0, false, 1, true));
    DT_RETURN_IF_ERROR(check_range("beta2", h.beta2(), 0, false, 1, true));
    DT_RETURN_IF_ERROR(check_range("eps", h.eps(), 0, true, 1, false));
    DT_RETURN_IF_ERROR(check_range("weight_decay", h.weight_decay(), 0, false, kInf, true));
    DT_RETURN_IF_ERROR(check_range("max_grad_norm", h.max_grad_norm(), 0, false, kInf, true));
    if (h.gradient_accumulation() < 1 || h.gradient_accumulation() > 4096) {
        return invalid(absl::StrCat("hyperparameters.gradient_accumulation (",
                                    h.gradient_accumulation(), ") must be in [1, 4096]"));
    }
    if (h.tokens_per_batch() < 16 || h.tokens_per_batch() > (int64_t{1} << 24)) {
        return invalid(absl::StrCat("hyperparameters.tokens_per_batch (", h.tokens_per_batch(),
                                    ") must be in [16, 16777216]"));
    }
    return absl::OkStatus();
}

absl::Status validate_data(const v1::DataSpec& d, const InputLimits& limits) {
    if (d.train_files().empty()) return invalid("data.train_files is required");
    DT_RETURN_IF_ERROR(check_list("data.train_files", d.train_files(), limits));
    if (d.train_weights_size() > 0 && d.train_weights_size() != d.train_files_size()) {
        return invalid(absl::StrCat("data.train_weights has ", d.train_weights_size(),
                                    " entries for ", d.train_files_size(),
                                    " train files (one per file, or none)"));
    }
    for (int i = 0; i < d.train_weights_size(); ++i) {
        const double w = d.train_weights(i);
        if (!std::isfinite(w) || w <= 0 || w > 1000) {
            return invalid(
                absl::StrCat("data.train_files[", i, "] weight (", w, ") must be in (0, 1000]"));
        }
    }
    DT_RETURN_IF_ERROR(check_list("data.eval_files", d.eval_files(), limits));
    DT_RETURN_IF_ERROR(check_string("data.tokenizer", d.tokenizer()));
    const std::string& t = d.chat_template();
    if (!t.empty() && t != "qwen3" && t != "qwen3_5") {
        return invalid(absl::StrCat("data.chat_template ('", t, "') must be qwen3 or qwen3_5"));
    }
    if (d.max_document_bytes() < 16 || d.max_document_bytes() > (int64_t{256} << 20)) {
        return invalid(absl::StrCat("data.max_document_bytes (", d.max_document_bytes(),
                                    ") must be in [16, 268435456]"));
    }
    if (d.max_document_tokens() < 1 || d.max_document_tokens() > (int64_t{1} << 24)) {
        return invalid(absl::StrCat("data.max_document_tokens (", d.max_document_tokens(),
                                    ") must be in [1, 16777216]"));
    }
    if (d.shuffle_window() < 1) {
        return invalid(absl::StrCat("data.shuffle_window (", d.shuffle_window(), ") must be >= 1"));
    }
    return absl::OkStatus();
}

// Every enum field holds a value its enum names: over gRPC an unknown number would otherwise be
// read as a default without a word.
absl::Status check_enums(const google::protobuf::Message& m, const std::string& prefix) {
    const google::protobuf::Reflection* r = m.GetReflection();
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    r->ListFields(m, &fields);
    for (const auto* f : fields) {
        const std::string path = prefix + f->name();
        if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && !f->is_map()) {
            if (f->is_repeated()) {
                for (int i = 0; i < r->FieldSize(m, f); ++i) {
                    DT_RETURN_IF_ERROR(check_enums(r->GetRepeatedMessage(m, f, i),
                                                   absl::StrCat(path, "[", i, "].")));
                }
            } else {
                DT_RETURN_IF_ERROR(check_enums(r->GetMessage(m, f), path + "."));
            }
        } else if (f->type() == google::protobuf::FieldDescriptor::TYPE_ENUM) {
            const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
            for (int i = 0; i < n; ++i) {
                const int v =
                    f->is_repeated() ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f);
                if (f->enum_type()->FindValueByNumber(v) == nullptr) {
                    return invalid(
                        absl::StrCat(path, ": unknown ", f->enum_type()->name(), " value ", v));
                }
            }
        }
    }
    return absl::OkStatus();
}

absl::Status validate_labels(const google::protobuf::Map<std::string, std::string>& labels) {
    static const std::regex kKey("[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?");
    if (labels.size() > kMaxLabels) {
        return invalid(
            absl::StrCat("labels has ", labels.size(), " entries, more than ", kMaxLabels));
    }
    for (const auto& [k, v] : labels) {
        if (!std::regex_match(k, kKey)) {
            return invalid(
                absl::StrCat("labels key '", k.substr(0, 80),
                             "' must match [a-z0-9]([a-z0-9_.-]*[a-z0-9])?, <= 63 bytes"));
        }
        if (v.size() > 256) return invalid(absl::StrCat("labels[", k, "] is over 256 bytes"));
    }
    return absl::OkStatus();
}

// The symlink-resolved absolute form of `p`. The longest existing prefix is resolved by the
// kernel (realpath); what does not exist yet (an output folder) must be plain names, no "." or
// ".." and none over NAME_MAX bytes. A path that cannot be fully resolved (a component too long,
// a loop, a dangling link, no permission) is refused, never cleaned up textually: a textual
// ".." would undo a symlink the kernel never looked at.
absl::StatusOr<std::string> resolve(const fs::path& p) {
    fs::path existing = p.is_absolute() ? p : fs::absolute(p);
    std::vector<std::string> missing;  // the tail that does not exist, innermost last
    while (true) {
        struct stat st {};
        if (::lstat(existing.c_str(), &st) == 0) break;
        if (errno != ENOENT || !existing.has_relative_path()) {
            return absl::InvalidArgumentError(
                absl::StrCat("cannot be resolved (", std::strerror(errno), ")"));
        }
        missing.insert(missing.begin(), existing.filename().string());
        existing = existing.parent_path();
    }
    std::error_code ec;
    fs::path resolved = fs::canonical(existing, ec);
    if (ec)
        return absl::InvalidArgumentError(absl::StrCat("cannot be resolved (", ec.message(), ")"));
    for (const std::string& name : missing) {
        if (name.empty()) continue;  // a trailing slash
        if (name == "." || name == ".." || name.size() > NAME_MAX) {
            return absl::InvalidArgumentError(absl::StrCat(
                "cannot be resolved ('", name.substr(0, 40), name.size() > 40 ? "...'" : "'",
                " follows a folder that does not exist)"));
        }
        resolved /= name;
    }
    return resolved.string();
}

bool strictly_beneath(const std::string& path, const std::string& root) {
    if (path.size() <= root.size() || path.compare(0, root.size(), root) != 0) return false;
    return root.back() == '/' || path[root.size()] == '/';
}

struct PathRule {
    const char* kind;  // "models", "data", "outputs"
    std::vector<std::string> roots;
    fs::file_type must_be = fs::file_type::none;  // none: may be missing (outputs)
    const char* missing_reason = "INVALID_CONFIG";
};

// Resolves `value` (relative ones against the first root), confines it under the rule's roots,
// then checks existence. Confinement comes first so probing outside the roots reveals nothing.
absl::StatusOr<std::string> confine(const std::string& field, const std::string& value,
                                    const PathRule& rule) {
    DT_RETURN_IF_ERROR(check_string(field, value));
    if (value.empty()) return invalid(absl::StrCat(field, " is required"));
    if (rule.roots.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("PATH_NOT_ALLOWED: ", field, ": no ", rule.kind, " roots are configured"));
    }
    fs::path p(value);
    if (p.is_relative()) p = fs::path(rule.roots.front()) / p;
    const auto refused = [&](const std::string& why) {
        // Names the field and its roots as configured, never where the path led (that could
        // reveal the daemon's folders, /proc/self/cwd or a descriptor's target).
        return absl::InvalidArgumentError(absl::StrCat(
            "PATH_NOT_ALLOWED: ", field, ": '", value, "' ", why, "; it must be beneath the ",
            rule.kind, " roots [", absl::StrJoin(rule.roots, ", "), "]"));
    };
    absl::StatusOr<std::string> resolved_or = resolve(p);
    if (!resolved_or.ok()) return refused(std::string(resolved_or.status().message()));
    const std::string& resolved = *resolved_or;
    bool allowed = false;
    for (const std::string& root : rule.roots) {
        absl::StatusOr<std::string> r = resolve(root);
        allowed = allowed || (r.ok() && strictly_beneath(resolved, *r));
    }
    if (!allowed) return refused("is not allowed");
    if (rule.must_be != fs::file_type::none) {
        std::error_code ec;
        const fs::file_type t = fs::status(resolved, ec).type();
        const bool any = rule.must_be == fs::file_type::unknown && t != fs::file_type::not_found;
        if (!any && t != rule.must_be) {
            return absl::InvalidArgumentError(
                absl::StrCat(rule.missing_reason, ": ", field, ": '", resolved, "' ",
                             rule.must_be == fs::file_type::directory ? "is not a folder"
                             : rule.must_be == fs::file_type::regular ? "is not a file"
                                                                      : "does not exist"));
        }
    }
    return resolved;
}

}  // namespace

// adapter: LoRA only, PEFT's knobs in range, known target modules.
absl::Status validate_adapter(const v1::JobSpec& spec, const InputLimits& limits) {
    const v1::AdapterSpec& a = spec.adapter();
    if (a.type().empty()) {
        if (a.ByteSizeLong() == 0) return absl::OkStatus();
        return invalid("adapter: type is required (lora) when other adapter fields are set");
    }
    if (a.type() != "lora")
        return invalid(absl::StrCat("adapter.type ('", a.type(), "') must be lora"));
    if (a.rank() < 1 || a.rank() > 1024) {
        return invalid(absl::StrCat("adapter.rank (", a.rank(), ") must be in [1, 1024]"));
    }
    if (!std::isfinite(a.alpha()) || a.alpha() <= 0) {
        return invalid(absl::StrCat("adapter.alpha (", a.alpha(), ") must be a positive number"));
    }
    if (a.dropout() != 0) {
        return invalid(
            absl::StrCat("adapter.dropout (", a.dropout(), "): only 0 is supported so far"));
    }
    DT_RETURN_IF_ERROR(check_list("adapter.target_modules", a.target_modules(), limits));
    const std::vector<std::string> modules(a.target_modules().begin(), a.target_modules().end());
    if (absl::Status s = parse_lora_targets(modules).status(); !s.ok()) {
        return invalid(absl::StrCat("adapter.target_modules: ", s.message()));
    }
    if (!a.export_().empty() && a.export_() != "peft" && a.export_() != "merged") {
        return invalid(absl::StrCat("adapter.export ('", a.export_(), "') must be peft or merged"));
    }
    return absl::OkStatus();
}

namespace {

absl::Status validate_precision(const v1::JobSpec& spec) {
    const std::string& p = spec.precision().projections();
    if (p.empty() || p == "bf16") return absl::OkStatus();
    if (p != "fp8") {
        return invalid(absl::StrCat("precision.projections ('", p, "') must be bf16 or fp8"));
    }
    if (spec.resources().gpus() == 0) {
        return invalid("precision.projections (fp8) needs GPU ranks (resources.gpus > 0)");
    }
    return absl::OkStatus();
}

absl::Status validate_early_stopping(const v1::JobSpec& spec) {
    const v1::EarlyStopping& e = spec.early_stopping();
    if (e.patience() < 0 || e.patience() > 1000) {
        return invalid(
            absl::StrCat("early_stopping.patience (", e.patience(), ") must be in [0, 1000]"));
    }
    if (!std::isfinite(e.min_delta()) || e.min_delta() < 0) {
        return invalid(absl::StrCat("early_stopping.min_delta (", e.min_delta(), ") must be >= 0"));
    }
    if (e.patience() == 0) {
        if (e.min_delta() == 0) return absl::OkStatus();
        return invalid(absl::StrCat("early_stopping.min_delta (", e.min_delta(),
                                    ") needs early_stopping.patience (> 0)"));
    }
    if (spec.data().eval_files().empty() || spec.eval_every_n_steps() <= 0) {
        return invalid(absl::StrCat("early_stopping.patience (", e.patience(),
                                    ") needs data.eval_files and eval_every_n_steps (",
                                    spec.eval_every_n_steps(), ") > 0"));
    }
    return absl::OkStatus();
}

}  // namespace

absl::Status validate_job_spec(const v1::JobSpec& spec, const InputLimits& limits) {
    DT_RETURN_IF_ERROR(check_string("display_name", spec.display_name()));
    if (spec.model().empty()) return invalid("model is required");
    if (spec.output_dir().empty()) return invalid("output_dir is required");
    DT_RETURN_IF_ERROR(check_enums(spec, ""));
    DT_RETURN_IF_ERROR(validate_hyperparameters(spec.hyperparameters()));
    DT_RETURN_IF_ERROR(validate_data(spec.data(), limits));
    DT_RETURN_IF_ERROR(validate_labels(spec.labels()));
    DT_RETURN_IF_ERROR(check_string("resume_from", spec.resume_from()));
    DT_RETURN_IF_ERROR(validate_adapter(spec, limits));
    DT_RETURN_IF_ERROR(
        check_list("kernels.allow_non_fused", spec.kernels().allow_non_fused(), limits));
    // Every job's spec is stored and listed: bound the whole, not only each field.
    if (spec.ByteSizeLong() > kMaxSpecBytes) {
        return invalid(absl::StrCat("the job spec is ", spec.ByteSizeLong(), " bytes, more than ",
                                    kMaxSpecBytes));
    }
    const auto& c = spec.checkpoint();
    if (c.every_n_steps() < 0 || c.keep_last_n() < 1) {
        return invalid(absl::StrCat("checkpoint.every_n_steps (", c.every_n_steps(),
                                    ") must be >= 0 and keep_last_n (", c.keep_last_n(), ") >= 1"));
    }
    const auto& r = spec.resources();
    if (r.gpus() < 0 || r.gpus() > 64) {
        return invalid(absl::StrCat("resources.gpus (", r.gpus(), ") must be in [0, 64]"));
    }
    if (r.gpus() > 0 && r.cpu_ranks() != 0) {
        return invalid(absl::StrCat("resources.cpu_ranks (", r.cpu_ranks(),
                                    ") applies only when resources.gpus is 0, got gpus (", r.gpus(),
                                    ")"));
    }
    if (r.gpus() == 0 && (r.cpu_ranks() < 1 || r.cpu_ranks() > 64)) {
        return invalid(
            absl::StrCat("resources.cpu_ranks (", r.cpu_ranks(), ") must be in [1, 64]"));
    }
    const int ranks = r.gpus() > 0 ? r.gpus() : r.cpu_ranks();
    if (r.nodes() < 0 || r.nodes() > 64) {
        return invalid(absl::StrCat("resources.nodes (", r.nodes(), ") must be in [0, 64]"));
    }
    if (r.nodes() > 0 && ranks % r.nodes() != 0) {
        return invalid(absl::StrCat("resources.", r.gpus() > 0 ? "gpus (" : "cpu_ranks (", ranks,
                                    ") must be a multiple of resources.nodes (", r.nodes(),
                                    "): every node runs the same number of ranks"));
    }
    if (spec.eval_every_n_steps() < 0) {
        return invalid(
            absl::StrCat("eval_every_n_steps (", spec.eval_every_n_steps(), ") must be >= 0"));
    }
    if (spec.eval_every_n_steps() > 0 && spec.data().eval_files().empty()) {
        return invalid(absl::StrCat("eval_every_n_steps (", spec.eval_every_n_steps(),
                                    ") needs data.eval_files"));
    }
    DT_RETURN_IF_ERROR(validate_early_stopping(spec));
    DT_RETURN_IF_ERROR(validate_precision(spec));
    if (spec.max_restarts() < 0 || spec.max_restarts() > 100) {
        return invalid(
            absl::StrCat("max_restarts (", spec.max_restarts(), ") must be in [0, 100]"));
    }
    if (spec.priority() < -1000 || spec.priority() > 1000) {
        return invalid(absl::StrCat("priority (", spec.priority(), ") must be in [-1000, 1000]"));
    }
    return absl::OkStatus();
}

namespace {

// Chat data is rendered with the base's own template unless the spec names a built-in one: a
// base whose template deltatune does not render is refused here, at submission, not when the
// rank reads its data (choose_chat_template says what to set).
absl::Status check_chat_template(const std::string& model, const v1::DataSpec& d) {
    if (!d.chat_template().empty()) return absl::OkStatus();
    const std::string folder = tokenizer_folder_of(d.tokenizer().empty() ? model : d.tokenizer());
    absl::StatusOr<std::optional<std::string>> carried = read_carried_chat_template(folder);
    if (!carried.ok()) return invalid(std::string(carried.status().message()));
    return choose_chat_template(0, "", *carried).status();  // refuses a template it cannot render
}

}  // namespace

absl::Status resolve_job_paths(v1::JobSpec* spec, const PathRoots& roots) {
    const PathRule model{"models", roots.models, fs::file_type::directory};
    PathRule tokenizer{"models or data", roots.models, fs::file_type::unknown};
    tokenizer.roots.insert(tokenizer.roots.end(), roots.data.begin(), roots.data.end());
    const PathRule data{"data", roots.data, fs::file_type::regular, "DATASET_NOT_FOUND"};
    const PathRule output{"outputs", roots.outputs};
    DT_ASSIGN_OR_RETURN(*spec->mutable_model(), confine("model", spec->model(), model));
    v1::DataSpec* d = spec->mutable_data();
    if (!d->tokenizer().empty()) {
        DT_ASSIGN_OR_RETURN(*d->mutable_tokenizer(),
                            confine("data.tokenizer", d->tokenizer(), tokenizer));
    }
    bool chat = false;
    std::vector<DataKind> train_kinds;
    for (int i = 0; i < d->train_files_size(); ++i) {
        const std::string field = absl::StrCat("data.train_files[", i, "]");
        DT_ASSIGN_OR_RETURN(*d->mutable_train_files(i), confine(field, d->train_files(i), data));
        DT_ASSIGN_OR_RETURN(const DataKind kind, check_data_file(field, d->train_files(i), *d));
        train_kinds.push_back(kind);
        chat |= is_chat(kind);
    }
    for (int i = 0; i < d->eval_files_size(); ++i) {
        const std::string field = absl::StrCat("data.eval_files[", i, "]");
        DT_ASSIGN_OR_RETURN(*d->mutable_eval_files(i), confine(field, d->eval_files(i), data));
        DT_ASSIGN_OR_RETURN(const DataKind kind, check_data_file(field, d->eval_files(i), *d));
        chat |= is_chat(kind);
    }
    if (chat) DT_RETURN_IF_ERROR(check_chat_template(spec->model(), *d));
    if (d->overlong() == v1::OVERLONG_POLICY_UNSPECIFIED)
        d->set_overlong(default_overlong(train_kinds));
    DT_ASSIGN_OR_RETURN(*spec->mutable_output_dir(),
                        confine("output_dir", spec->output_dir(), output));
    if (!spec->resume_from().empty() && spec->resume_from().rfind("jobs/", 0) != 0) {
        const PathRule checkpoint{"outputs", roots.outputs, fs::file_type::directory};
        DT_ASSIGN_OR_RETURN(*spec->mutable_resume_from(),
                            confine("resume_from", spec->resume_from(), checkpoint));
    }
    return absl::OkStatus();
}

std::vector<std::string> existing_resolved_roots(const std::vector<std::string>& roots) {
    std::vector<std::string> out;
    for (const std::string& root : roots) {
        std::error_code ec;
        const fs::path r = fs::canonical(root, ec);
        if (!ec && fs::is_directory(r, ec)) out.push_back(r.string());
    }
    return out;
}

absl::Status prepare_job_spec(v1::JobSpec* spec, const PathRoots& roots,
                              const InputLimits& limits) {
    normalize_job_spec(spec);
    DT_RETURN_IF_ERROR(validate_job_spec(*spec, limits));
    return resolve_job_paths(spec, roots);
}

}  // namespace deltatune::daemon
