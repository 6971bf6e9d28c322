// JobSpec -> job YAML by proto reflection, written so that parse_job_yaml reads every value back
// bit for bit (enum names, doubles, quoting) and marks every key given (no default replaces a 0).
#include "daemon/config/job_spec_yaml.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "yaml-cpp/yaml.h"

namespace deltatune::daemon {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

// The shortest text strtod reads back as the same double ("1e-05", "0.1", "32").
template <typename T>
std::string number_text(T v) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, ec == std::errc() ? end : buf);
}

// Strings another YAML reader would take for a bool, null or number are quoted (yaml-cpp quotes
// what YAML itself needs: "", "null", ": ", newlines, ...); parse_job_yaml reads either form.
void emit_string(YAML::Emitter& out, const std::string& s) {
    static const std::set<std::string> kWords = {"true", "false", "yes", "no",  "on",
                                                 "off",  "y",     "n",   "null"};
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    const bool number = !s.empty() && end == s.c_str() + s.size();
    if (number || kWords.count(absl::AsciiStrToLower(s))) out << YAML::DoubleQuoted;
    out << s;
}

// The value job_yaml.cc's parse_enum takes for `want` (upper case): the first whose name is
// `want` or ends in "_" + `want`.
const pb::EnumValueDescriptor* enum_match(const pb::EnumDescriptor* e, const std::string& want) {
    for (int i = 0; i < e->value_count(); ++i) {
        const std::string& name = e->value(i)->name();
        if (name == want || (name.size() > want.size() && name.ends_with("_" + want))) {
            return e->value(i);
        }
    }
    return nullptr;
}

// The shortest "_"-separated tail of the value's name that parses back to it, lower case
// (LR_SCHEDULE_COSINE -> "cosine", DATA_FORMAT_UNSPECIFIED -> "unspecified"); a number without
// a name stays a number.
std::string enum_text(const pb::EnumDescriptor* e, int number) {
    const pb::EnumValueDescriptor* v = e->FindValueByNumber(number);
    if (v == nullptr) return number_text(number);
    const std::string& name = v->name();
    for (size_t cut = name.rfind('_'); cut != std::string::npos && cut > 0;
         cut = name.rfind('_', cut - 1)) {
        const std::string tail = name.substr(cut + 1);
        if (enum_match(e, tail) == v) return absl::AsciiStrToLower(tail);
    }
    return absl::AsciiStrToLower(name);
}

// One value of a scalar field: `i` indexes a repeated field, ignored otherwise.
void emit_scalar(YAML::Emitter& out, const pb::Message& m, const FD* f, int i) {
    const pb::Reflection* r = m.GetReflection();
    const bool rep = f->is_repeated();
    switch (f->cpp_type()) {
        case FD::CPPTYPE_STRING:
            emit_string(out, rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f));
            break;
        case FD::CPPTYPE_INT32:
            out << number_text(rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
            break;
        case FD::CPPTYPE_INT64:
            out << number_text(rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f));
            break;
        case FD::CPPTYPE_UINT32:
            out << number_text(rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
            break;
        case FD::CPPTYPE_UINT64:
            out << number_text(rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
            break;
        case FD::CPPTYPE_DOUBLE:
            out << number_text(rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f));
            break;
        case FD::CPPTYPE_FLOAT:
            out << number_text(rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f));
            break;
        case FD::CPPTYPE_BOOL:
            out << ((rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f)) ? "true" : "false");
            break;
        case FD::CPPTYPE_ENUM:
            out << enum_text(f->enum_type(),
                             rep ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f));
            break;
        case FD::CPPTYPE_MESSAGE:
            break;  // never called for messages
    }
}

void emit_message(YAML::Emitter& out, const pb::Message& m);
void emit_field(YAML::Emitter& out, const pb::Message& m, const FD* f);

// The text a map key sorts by (the key itself, for string keys).
std::string key_text(const pb::Message& entry, const FD* key) {
    if (key->cpp_type() == FD::CPPTYPE_STRING) return entry.GetReflection()->GetString(entry, key);
    YAML::Emitter e;
    emit_scalar(e, entry, key, -1);
    return e.c_str();
}

// map<K, V>: a mapping, keys sorted.
void emit_map(YAML::Emitter& out, const pb::Message& m, const FD* f) {
    const pb::Reflection* r = m.GetReflection();
    const FD* key = f->message_type()->map_key();
    std::vector<std::pair<std::string, const pb::Message*>> entries;
    for (int i = 0; i < r->FieldSize(m, f); ++i) {
        const pb::Message& entry = r->GetRepeatedMessage(m, f, i);
        entries.emplace_back(key_text(entry, key), &entry);
    }
    std::sort(entries.begin(), entries.end());
    if (entries.empty()) out << YAML::Flow;  // `labels: {}`
    out << YAML::BeginMap;
    for (const auto& [text, entry] : entries) {
        out << YAML::Key;
        emit_scalar(out, *entry, key, -1);
        out << YAML::Value;
        emit_field(out, *entry, f->message_type()->map_value());
    }
    out << YAML::EndMap;
}

// Repeated fields: scalars as a flow list (`[a, b]`), messages as a block list of mappings.
void emit_list(YAML::Emitter& out, const pb::Message& m, const FD* f) {
    const pb::Reflection* r = m.GetReflection();
    const int n = r->FieldSize(m, f);
    const bool messages = f->cpp_type() == FD::CPPTYPE_MESSAGE;
    if (!messages || n == 0) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (int i = 0; i < n; ++i) {
        if (messages) {
            emit_message(out, r->GetRepeatedMessage(m, f, i));
        } else {
            emit_scalar(out, m, f, i);
        }
    }
    out << YAML::EndSeq;
}

// data.train_weights when it holds one weight per data.train_files entry (null otherwise): then
// both are written as train_files `[{path: a.jsonl, weight: 2}, ...]`, the only form that parse
// reads weights back from beside the files.
const FD* paired_weights(const pb::Message& m) {
    const pb::Descriptor* d = m.GetDescriptor();
    const FD* files = d->FindFieldByName("train_files");
    const FD* weights = d->FindFieldByName("train_weights");
    if (files == nullptr || weights == nullptr ||
        files->full_name() != "deltatune.v1.DataSpec.train_files") {
        return nullptr;
    }
    const int n = m.GetReflection()->FieldSize(m, weights);
    return n > 0 && n == m.GetReflection()->FieldSize(m, files) ? weights : nullptr;
}

void emit_weighted_files(YAML::Emitter& out, const pb::Message& m, const FD* weights) {
    const pb::Reflection* r = m.GetReflection();
    const FD* files = m.GetDescriptor()->FindFieldByName("train_files");
    out << YAML::BeginSeq;
    for (int i = 0; i < r->FieldSize(m, files); ++i) {
        out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
        emit_string(out, r->GetRepeatedString(m, files, i));
        out << YAML::Key << "weight" << YAML::Value
            << number_text(r->GetRepeatedDouble(m, weights, i)) << YAML::EndMap;
    }
    out << YAML::EndSeq;
}

// The value of field `f` of `m` (its key already written).
void emit_field(YAML::Emitter& out, const pb::Message& m, const FD* f) {
    const pb::Reflection* r = m.GetReflection();
    if (f->is_map()) {
        emit_map(out, m, f);
    } else if (f->is_repeated()) {
        emit_list(out, m, f);
    } else if (f->has_presence() && !r->HasField(m, f)) {
        out << YAML::Null << YAML::Comment("not set");  // read back as absent
    } else if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        emit_message(out, r->GetMessage(m, f));
    } else {
        emit_scalar(out, m, f, -1);
    }
}

void emit_message(YAML::Emitter& out, const pb::Message& m) {
    const pb::Descriptor* d = m.GetDescriptor();
    const pb::Reflection* r = m.GetReflection();
    const FD* weights = paired_weights(m);
    if (d->field_count() == 0) out << YAML::Flow;  // `{}`
    out << YAML::BeginMap;
    for (int i = 0; i < d->field_count(); ++i) {
        const FD* f = d->field(i);
        if (f == weights) continue;  // written with train_files
        if (f->real_containing_oneof() != nullptr && !r->HasField(m, f)) continue;  // one member
        out << YAML::Key << f->name() << YAML::Value;
        if (weights != nullptr && f->name() == "train_files") {
            emit_weighted_files(out, m, weights);
        } else {
            emit_field(out, m, f);
        }
    }
    out << YAML::EndMap;
}

}  // namespace

std::string job_spec_to_yaml(const v1::JobSpec& spec) {
    YAML::Emitter out;
    out.SetNullFormat(YAML::LowerNull);
    emit_message(out, spec);
    return std::string(out.c_str()) + "\n";
}

}  // namespace deltatune::daemon
