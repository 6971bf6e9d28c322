#include "runtime/data/chat_template_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/dataset.h"

namespace deltatune {
namespace {

// Line ends as "\n", trailing spaces and tabs off every line, trailing blank lines off the end:
// the differences a template's text picks up between a JSON string and a .jinja file.
std::string normalized(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t begin = 0; begin <= text.size();) {
        const size_t end = std::min(text.find('\n', begin), text.size());
        std::string_view line = text.substr(begin, end - begin);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        out.append(line);
        out.push_back('\n');
        begin = end + 1;
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

absl::StatusOr<std::optional<std::string>> read_if_present(const std::string& path) {
    absl::StatusOr<std::string> text = read_file(path);
    if (absl::IsNotFound(text.status())) return std::optional<std::string>();
    if (!text.ok()) return text.status();
    return std::optional<std::string>(*std::move(text));
}

}  // namespace

const char* chat_template_name(ChatTemplateKind kind) {
    return kind == ChatTemplateKind::kQwen3 ? "qwen3" : "qwen3_5";
}

absl::StatusOr<std::optional<std::string>> carried_chat_template(
    const std::optional<std::string>& jinja, const std::optional<std::string>& tokenizer_config) {
    if (jinja) return jinja;
    if (!tokenizer_config) return std::optional<std::string>();
    const nlohmann::json config = nlohmann::json::parse(*tokenizer_config, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
        return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
    }
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::optional<std::string>();
    if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
    if (it->is_array()) {  // [{"name": ..., "template": ...}]: the default one serves
        for (const nlohmann::json& entry : *it) {
            if (entry.is_object() && entry.value("name", "") == "default" &&
                entry.contains("template") && entry["template"].is_string()) {
                return std::optional<std::string>(entry["template"].get<std::string>());
            }
        }
    }
    return absl::InvalidArgumentError(
        "tokenizer_config.json: \"chat_template\" is neither a string nor a list with a "
        "\"default\" entry");
}

absl::StatusOr<std::optional<std::string>> read_carried_chat_template(const std::string& dir) {
    DT_ASSIGN_OR_RETURN(const std::optional<std::string> jinja,
                        read_if_present(dir + "/chat_template.jinja"));
    DT_ASSIGN_OR_RETURN(const std::optional<std::string> config,
                        read_if_present(dir + "/tokenizer_config.json"));
    absl::StatusOr<std::optional<std::string>> carried = carried_chat_template(jinja, config);
    if (!carried.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, "/", carried.status().message()));
    }
    return carried;
}

std::optional<ChatTemplateKind> identify_chat_template(std::string_view text) {
    const std::string mine = normalized(text);
    for (ChatTemplateKind kind : {ChatTemplateKind::kQwen3, ChatTemplateKind::kQwen35}) {
        if (mine == normalized(builtin_chat_template_text(kind))) return kind;
    }
    return std::nullopt;
}

absl::StatusOr<ChatTemplateKind> choose_chat_template(int64_t vocab_size,
                                                      std::string_view requested,
                                                      const std::optional<std::string>& carried) {
    if (!requested.empty()) return parse_chat_template_kind(requested);
    if (carried) {
        if (std::optional<ChatTemplateKind> kind = identify_chat_template(*carried)) return *kind;
        return absl::InvalidArgumentError(absl::StrCat(
            "CHAT_TEMPLATE_UNKNOWN: the model's chat template (", carried->size(),
            " bytes) is not one deltatune renders (qwen3, qwen3_5), so training with it would "
            "differ from serving it; set data.chat_template to qwen3 or qwen3_5 to train with that "
            "one (the export then carries it), or give chat data already tokenized"));
    }
    return vocab_size >= 248000 ? ChatTemplateKind::kQwen35 : ChatTemplateKind::kQwen3;
}

std::string tokenizer_folder_of(const std::string& path) {
    absl::StatusOr<DirEntry> st = process_sandbox().stat(path);
    if (st.ok() && st->type == EntryType::kDirectory) return path;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

absl::StatusOr<ChatTemplateKind> chat_template_for(const Tokenizer& tokenizer,
                                                   const std::string& path,
                                                   std::string_view requested) {
    std::optional<std::string> carried;
    if (requested.empty()) {
        DT_ASSIGN_OR_RETURN(carried, read_carried_chat_template(tokenizer_folder_of(path)));
    }
    return choose_chat_template(tokenizer.vocab_size(), requested, carried);
}

}  // namespace deltatune
