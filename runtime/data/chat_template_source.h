// Which chat template a job renders its conversations with, and which one its export serves. A
// base carries its template as chat_template.jinja or as tokenizer_config.json's "chat_template";
// deltatune renders two templates in code (chat_template.h). A job trains with the base's own
// template only when it is one of the two; a base with another template is refused unless the job
// names a built-in one, and the export then carries that one's text, so what a model was trained
// on is what it is served with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/data/chat_template.h"

namespace deltatune {

// The Jinja text Hugging Face ships for each built-in template (runtime/data/chat_templates/).
std::string_view builtin_chat_template_text(ChatTemplateKind kind);
const char* chat_template_name(ChatTemplateKind kind);  // "qwen3" or "qwen3_5"

// The template a folder carries, from its files' contents (nullopt: no such file):
// chat_template.jinja first, else tokenizer_config.json's "chat_template" (a string, or the entry
// named "default" of a list of {name, template}). nullopt when neither holds one; InvalidArgument
// when tokenizer_config.json is not JSON.
absl::StatusOr<std::optional<std::string>> carried_chat_template(
    const std::optional<std::string>& jinja, const std::optional<std::string>& tokenizer_config);
// The same, read from DIR/chat_template.jinja and DIR/tokenizer_config.json (through the process
// sandbox, as every runtime file).
absl::StatusOr<std::optional<std::string>> read_carried_chat_template(const std::string& dir);

// The built-in template `text` is, compared with line ends as "\n" and trailing whitespace
// dropped from each line and from the end; nullopt for any other text.
std::optional<ChatTemplateKind> identify_chat_template(std::string_view text);

// The template chat data is rendered with: `requested` (qwen3 or qwen3_5) when not empty; else the
// base's `carried` template when there is one, which must be a built-in one (InvalidArgument
// CHAT_TEMPLATE_UNKNOWN naming the choices otherwise); else the one whose vocabulary `vocab_size`
// is (Qwen3.5's has 248,320 entries, Qwen3's 151,669).
absl::StatusOr<ChatTemplateKind> choose_chat_template(int64_t vocab_size,
                                                      std::string_view requested,
                                                      const std::optional<std::string>& carried);

// The folder a tokenizer path names: the path itself, or the folder of a tokenizer.json.
std::string tokenizer_folder_of(const std::string& path);
// choose_chat_template for `tokenizer`, loaded from `path`, with what its folder carries: the one
// rule for jobs, `deltatune tokenize` and `deltatune pack-stats`.
absl::StatusOr<ChatTemplateKind> chat_template_for(const Tokenizer& tokenizer,
                                                   const std::string& path,
                                                   std::string_view requested);

}  // namespace deltatune
