// The Qwen ChatML chat template, rendered in code (no Jinja engine) exactly as the models' own
// chat_template does for conversations without tools or images (Qwen3 and Qwen3.5 variants), and
// the loss mask that trains assistant turns only: everything the assistant generates after its
// "<|im_start|>assistant\n" header, up to and including its "<|im_end|>".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/tokenizer.h"
#include "runtime/model/packed_batch.h"

namespace deltatune {

enum class ChatTemplateKind { kQwen3, kQwen35 };

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;
    std::string reasoning_content;  // optional; assistant only
    bool has_reasoning_content = false;
};

struct RenderedChat {
    std::string text;
    // Byte ranges [begin, end) of `text` that are trained (assistant generations).
    std::vector<std::pair<size_t, size_t>> trained;
};

// Renders a conversation. Unknown roles, a system message that is not first, or (Qwen3.5) a
// conversation with no user query are InvalidArgument, as the templates raise.
absl::StatusOr<RenderedChat> render_chat(const std::vector<ChatMessage>& messages,
                                         ChatTemplateKind kind);

// Renders and tokenizes a conversation into a Document: labels equal input_ids on tokens that
// overlap a trained byte range and -100 elsewhere (Hugging Face's assistant-mask rule).
absl::StatusOr<Document> tokenize_chat(const Tokenizer& tokenizer,
                                       const std::vector<ChatMessage>& messages,
                                       ChatTemplateKind kind);

}  // namespace deltatune
