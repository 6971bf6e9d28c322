// make_chat_tokenizer: binds tokenize_chat to a loaded Tokenizer. Kept apart from dataset.cc so
// that programs reading only pre-tokenized data do not link the tokenizer.
#include "runtime/data/dataset.h"

#include "absl/strings/str_cat.h"
#include "runtime/data/chat_template_source.h"

namespace deltatune {

// Raised whenever reading or rendering a chat line changes what it tokenizes to (2: tool calls,
// tools, content parts and weights; 3: ShareGPT, prompt/completion and text lines), so that
// caches written before are not reused.
constexpr int kChatReadingVersion = 3;

ChatTokenizer make_chat_tokenizer(const Tokenizer& tokenizer, ChatTemplateKind kind) {
    ChatTokenizer t;
    t.tokenize = [&tokenizer, kind](const ChatConversation& chat) {
        return tokenize_chat(tokenizer, chat, kind);
    };
    t.fingerprint = absl::StrCat(tokenizer.fingerprint(), "|template=", chat_template_name(kind),
                                 "|reading=", kChatReadingVersion);
    return t;
}

}  // namespace deltatune
