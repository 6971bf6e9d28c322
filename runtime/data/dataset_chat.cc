// make_chat_tokenizer: binds tokenize_chat to a loaded Tokenizer. Kept apart from dataset.cc so
// that programs reading only pre-tokenized data do not link the tokenizer.
#include "runtime/data/dataset.h"

#include "absl/strings/str_cat.h"

namespace deltatune {

ChatTokenizer make_chat_tokenizer(const Tokenizer& tokenizer, ChatTemplateKind kind) {
    ChatTokenizer t;
    t.tokenize = [&tokenizer, kind](const std::vector<ChatMessage>& messages) {
        return tokenize_chat(tokenizer, messages, kind);
    };
    t.fingerprint =
        absl::StrCat(tokenizer.fingerprint(),
                     "|template=", kind == ChatTemplateKind::kQwen3 ? "qwen3" : "qwen3_5");
    return t;
}

}  // namespace deltatune
