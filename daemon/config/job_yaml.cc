// Job YAML -> JobSpec by proto reflection, then defaults, cross-field rules and path confinement.
// Reflection keeps the YAML schema and the proto identical by construction.
#include "daemon/config/job_yaml.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune::daemon {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

// Visiting more nodes than this means aliases are being used to multiply the document.
constexpr int64_t kMaxYamlNodes = 200000;

std::string join_path(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
}

const char* node_kind(const YAML::Node& n) {
    if (n.IsMap()) return "a mapping";
    if (n.IsSequence()) return "a list";
    if (n.IsNull()) return "null";
    return "a scalar";
}

// Depth, per-collection length and total node count, checked with an explicit stack so a hostile
// document cannot overflow ours.
absl::Status check_bounds(const YAML::Node& root, const InputLimits& limits,
                          const std::string& what) {
    std::vector<std::pair<YAML::Node, int>> stack{{root, 0}};
    int64_t visited = 0;
    while (!stack.empty()) {
        auto [node, depth] = stack.back();
        stack.pop_back();
        if (++visited > kMaxYamlNodes) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": more than ", kMaxYamlNodes, " YAML nodes (alias bomb?)"));
        }
        if (!node.IsMap() && !node.IsSequence()) continue;
        if (depth >= limits.max_yaml_depth) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": nesting deeper than max_yaml_depth (", limits.max_yaml_depth, ")"));
        }
        if (static_cast<int64_t>(node.size()) > limits.max_list_length) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": a list or mapping has ", node.size(),
                             " entries, more than max_list_length (", limits.max_list_length, ")"));
        }
        for (const auto& item : node) {
            if (node.IsMap()) {
                stack.emplace_back(item.first, depth + 1);
                stack.emplace_back(item.second, depth + 1);
            } else {
                stack.emplace_back(item, depth + 1);
            }
        }
    }
    return absl::OkStatus();
}

absl::Status type_error(const std::string& path, const char* want, const YAML::Node& n) {
    if (n.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": expected ", want, ", got '", n.Scalar(), "'"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected ", want, ", got ", node_kind(n)));
}

template <typename T>
absl::StatusOr<T> parse_integer(const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar()) return type_error(path, "an integer", n);
    const std::string& s = n.Scalar();
    T v{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": '", s, "' is out of range"));
    }
    if (ec != std::errc() || end != s.data() + s.size()) return type_error(path, "an integer", n);
    return v;
}

absl::StatusOr<double> parse_double(const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar()) return type_error(path, "a number", n);
    const std::string& s = n.Scalar();
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) return type_error(path, "a number", n);
    if (!std::isfinite(v)) return type_error(path, "a finite number", n);
    return v;
}

absl::StatusOr<const pb::EnumValueDescriptor*> parse_enum(const YAML::Node& n, const FD* f,
                                                          const std::string& path) {
    const pb::EnumDescriptor* e = f->enum_type();
    if (n.IsScalar()) {
        const std::string want = absl::AsciiStrToUpper(n.Scalar());
        for (int i = 0; i < e->value_count(); ++i) {
            const std::string& name = e->value(i)->name();
            const bool suffix = name.size() > want.size() && name.ends_with("_" + want);
            if (name == want || suffix) return e->value(i);
        }
    }
    std::vector<std::string> names;
    for (int i = 1; i < e->value_count(); ++i) names.push_back(e->value(i)->name());
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected one of ",
                                                   absl::StrJoin(names, ", "), ", got '",
                                                   n.IsScalar() ? n.Scalar() : node_kind(n), "'"));
}

// Sets (or appends, for repeated fields) one scalar field from a YAML scalar.
absl::Status set_scalar(pb::Message* m, const FD* f, const YAML::Node& n, const std::string& path) {
    const pb::Reflection* r = m->GetReflection();
    const bool rep = f->is_repeated();
    switch (f->cpp_type()) {
        case FD::CPPTYPE_STRING:
            if (!n.IsScalar()) return type_error(path, "a string", n);
            rep ? r->AddString(m, f, n.Scalar()) : r->SetString(m, f, n.Scalar());
            return absl::OkStatus();
        case FD::CPPTYPE_INT32: {
            DT_ASSIGN_OR_RETURN(const int32_t v, parse_integer<int32_t>(n, path));
            rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
            return absl::OkStatus();
        }
        case FD::CPPTYPE_INT64: {
            DT_ASSIGN_OR_RETURN(const int64_t v, parse_integer<int64_t>(n, path));
            rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
            return absl::OkStatus();
        }
        case FD::CPPTYPE_UINT64: {
            DT_ASSIGN_OR_RETURN(const uint64_t v, parse_integer<uint64_t>(n, path));
            rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
            return absl::OkStatus();
        }
        case FD::CPPTYPE_DOUBLE: {
            DT_ASSIGN_OR_RETURN(const double v, parse_double(n, path));
            rep ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
            return absl::OkStatus();
        }
        case FD::CPPTYPE_BOOL: {
            if (!n.IsScalar() || (n.Scalar() != "true" && n.Scalar() != "false")) {
                return type_error(path, "true or false", n);
            }
            const bool v = n.Scalar() == "true";
            rep ? r->AddBool(m, f, v) : r->SetBool(m, f, v);
            return absl::OkStatus();
        }
        case FD::CPPTYPE_ENUM: {
            DT_ASSIGN_OR_RETURN(const pb::EnumValueDescriptor* v, parse_enum(n, f, path));
            rep ? r->AddEnum(m, f, v) : r->SetEnum(m, f, v);
            return absl::OkStatus();
        }
        default:
            return absl::InternalError(absl::StrCat(path, ": unsupported field type"));
    }
}

absl::Status parse_message(const YAML::Node& node, pb::Message* m, const std::string& path,
                           std::set<std::string>* present);

// map<K, V> fields: a YAML mapping whose keys and values are scalars.
absl::Status parse_map(const YAML::Node& node, pb::Message* m, const FD* f,
                       const std::string& path) {
    if (!node.IsMap()) return type_error(path, "a mapping", node);
    std::set<std::string> seen;
    for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return type_error(path, "scalar keys", kv.first);
        const std::string key_path = absl::StrCat(path, "[", kv.first.Scalar(), "]");
        if (!seen.insert(kv.first.Scalar()).second) {
            return absl::InvalidArgumentError(absl::StrCat(key_path, ": duplicate key"));
        }
        pb::Message* entry = m->GetReflection()->AddMessage(m, f);
        const pb::Descriptor* d = entry->GetDescriptor();
        DT_RETURN_IF_ERROR(set_scalar(entry, d->map_key(), kv.first, key_path));
        DT_RETURN_IF_ERROR(set_scalar(entry, d->map_value(), kv.second, key_path));
    }
    return absl::OkStatus();
}

// data.train_files: each entry a path, or {path, weight} (a mixture); weights go to
// data.train_weights, 1 for the plain entries, and only when some entry names one.
absl::Status parse_train_files(const YAML::Node& value, pb::Message* m, const FD* f,
                               const std::string& path) {
    if (!value.IsSequence()) return type_error(path, "a list", value);
    const FD* weights = m->GetDescriptor()->FindFieldByName("train_weights");
    const pb::Reflection* r = m->GetReflection();
    std::vector<double> w;
    bool weighted = false;
    for (size_t i = 0; i < value.size(); ++i) {
        const std::string item = absl::StrCat(path, "[", i, "]");
        const YAML::Node& n = value[i];
        if (!n.IsMap()) {
            DT_RETURN_IF_ERROR(set_scalar(m, f, n, item));
            w.push_back(1.0);
            continue;
        }
        weighted = true;
        double weight = 1.0;
        bool have_path = false;
        for (const auto& kv : n) {
            const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
            if (key == "path" && !have_path) {
                DT_RETURN_IF_ERROR(set_scalar(m, f, kv.second, item + ".path"));
                have_path = true;
            } else if (key == "weight") {
                DT_ASSIGN_OR_RETURN(weight, parse_double(kv.second, item + ".weight"));
            } else {
                return absl::InvalidArgumentError(absl::StrCat(
                    item, ".", key,
                    ": unknown or repeated key (an entry is a path or {path, weight})"));
            }
        }
        if (!have_path) return absl::InvalidArgumentError(absl::StrCat(item, ": no path"));
        w.push_back(weight);
    }
    if (weighted) {
        if (r->FieldSize(*m, weights) > 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                path, ": weights given both in the entries and in data.train_weights"));
        }
        for (double x : w) r->AddDouble(m, weights, x);
    }
    return absl::OkStatus();
}

absl::Status parse_field(const YAML::Node& value, pb::Message* m, const FD* f,
                         const std::string& path, std::set<std::string>* present) {
    if (f->is_map()) return parse_map(value, m, f, path);
    if (f->full_name() == "deltatune.v1.DataSpec.train_files") {
        return parse_train_files(value, m, f, path);
    }
    if (f->is_repeated()) {
        if (!value.IsSequence()) return type_error(path, "a list", value);
        for (size_t i = 0; i < value.size(); ++i) {
            const std::string item = absl::StrCat(path, "[", i, "]");
            if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
                pb::Message* sub = m->GetReflection()->AddMessage(m, f);
                DT_RETURN_IF_ERROR(parse_message(value[i], sub, item, present));
            } else {
                DT_RETURN_IF_ERROR(set_scalar(m, f, value[i], item));
            }
        }
        return absl::OkStatus();
    }
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        return parse_message(value, m->GetReflection()->MutableMessage(m, f), path, present);
    }
    return set_scalar(m, f, value, path);
}

absl::Status parse_message(const YAML::Node& node, pb::Message* m, const std::string& path,
                           std::set<std::string>* present) {
    if (!node.IsMap()) return type_error(path.empty() ? "job" : path, "a mapping", node);
    std::set<std::string> seen;
    for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return type_error(path, "scalar keys", kv.first);
        const std::string key = kv.first.Scalar();
        const std::string child = join_path(path, key);
        const FD* f = m->GetDescriptor()->FindFieldByName(key);
        if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat(child, ": unknown key"));
        if (!seen.insert(key).second) {
            return absl::InvalidArgumentError(absl::StrCat(child, ": duplicate key"));
        }
        if (kv.second.IsNull()) continue;  // `key:` with no value reads as absent
        present->insert(child);
        DT_RETURN_IF_ERROR(parse_field(kv.second, m, f, child, present));
    }
    return absl::OkStatus();
}

// Sets a numeric or enum field, addressed by dotted path, to `value` when it is zero and was not
// given explicitly.
void default_if_zero(pb::Message* root, const std::string& path, double value,
                     const std::set<std::string>* present) {
    if (present != nullptr && present->count(path)) return;
    pb::Message* m = root;
    size_t start = 0;
    for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
        const FD* f = m->GetDescriptor()->FindFieldByName(path.substr(start, dot - start));
        m = m->GetReflection()->MutableMessage(m, f);
    }
    const FD* f = m->GetDescriptor()->FindFieldByName(path.substr(start));
    const pb::Reflection* r = m->GetReflection();
    // A field declared `optional` in job.proto carries presence over the wire too: an explicit
    // zero sent over gRPC then stays zero.
    if (f->has_presence() && r->HasField(*m, f)) return;
    switch (f->cpp_type()) {
        case FD::CPPTYPE_DOUBLE:
            if (r->GetDouble(*m, f) == 0) r->SetDouble(m, f, value);
            break;
        case FD::CPPTYPE_INT64:
            if (r->GetInt64(*m, f) == 0) r->SetInt64(m, f, static_cast<int64_t>(value));
            break;
        case FD::CPPTYPE_INT32:
            if (r->GetInt32(*m, f) == 0) r->SetInt32(m, f, static_cast<int32_t>(value));
            break;
        case FD::CPPTYPE_ENUM:
            if (r->GetEnumValue(*m, f) == 0) r->SetEnumValue(m, f, static_cast<int>(value));
            break;
        default:
            break;
    }
}

}  // namespace

absl::StatusOr<YAML::Node> load_yaml_bounded(std::string_view text, const InputLimits& limits,
                                             const std::string& what) {
    if (static_cast<int64_t>(text.size()) > limits.max_request_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            what, ": ", text.size(), " bytes, more than the limit of ", limits.max_request_bytes));
    }
    // yaml-cpp recurses per nesting level and fails with its own message past its limit: count
    // flow nesting ([ and { outside quotes) first, so deep input gets the limit's message.
    int depth = 0, deepest = 0;
    char quote = 0;
    for (const char c : text) {
        if (quote != 0) {
            if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
            quote = c;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    if (deepest > limits.max_yaml_depth) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": nesting deeper than max_yaml_depth (", limits.max_yaml_depth, ")"));
    }
    YAML::Node root;
    try {
        const std::vector<YAML::Node> docs = YAML::LoadAll(std::string(text));
        if (docs.size() > 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": holds ", docs.size(), " YAML documents; one job per file"));
        }
        if (!docs.empty()) root = docs.front();
    } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
    }
    DT_RETURN_IF_ERROR(check_bounds(root, limits, what));
    return root;
}

absl::StatusOr<ParsedJobSpec> parse_job_yaml(std::string_view text, const InputLimits& limits) {
    absl::StatusOr<YAML::Node> root = load_yaml_bounded(text, limits, "job");
    ParsedJobSpec out;
    absl::Status s = root.ok() ? parse_message(*root, &out.spec, "", &out.present) : root.status();
    if (s.ok()) return out;
    return absl::Status(s.code(), absl::StrCat("INVALID_CONFIG: ", s.message()));
}

void normalize_job_spec(v1::JobSpec* spec, const std::set<std::string>* present) {
    // clang-format off
    static const std::pair<const char*, double> kDefaults[] = {
        {"hyperparameters.learning_rate",         1e-5},
        {"hyperparameters.lr_schedule",           v1::LR_SCHEDULE_COSINE},
        {"hyperparameters.min_lr_ratio",          0.1},
        {"hyperparameters.beta1",                 0.9},
        {"hyperparameters.beta2",                 0.95},
        {"hyperparameters.eps",                   1e-8},
        {"hyperparameters.max_grad_norm",         1.0},
        {"hyperparameters.gradient_accumulation", 1},
        {"hyperparameters.tokens_per_batch",      8192},
        {"data.bad_lines",                        v1::BAD_LINE_POLICY_FAIL},
        {"data.shuffle_window",                   4096},
        {"data.max_document_bytes",               16 << 20},
        {"data.max_document_tokens",              1 << 20},
        {"checkpoint.keep_last_n",                2},
        {"max_restarts",                          3},
    };
    // clang-format on
    for (const auto& [path, value] : kDefaults) default_if_zero(spec, path, value, present);
    if (spec->resources().gpus() == 0) default_if_zero(spec, "resources.cpu_ranks", 1, present);
    if (spec->data().tokenizer().empty()) spec->mutable_data()->set_tokenizer(spec->model());
    if (!spec->adapter().type().empty()) {  // only a job with an adapter gets its defaults
        default_if_zero(spec, "adapter.rank", 16, present);
        default_if_zero(spec, "adapter.alpha", 32, present);
        v1::AdapterSpec* a = spec->mutable_adapter();
        if (a->target_modules().empty()) {
            for (size_t i = 0; i < kNumProj; ++i) {
                a->add_target_modules(proj_module_name(static_cast<Proj>(i)));
            }
        }
    }
}

}  // namespace deltatune::daemon
