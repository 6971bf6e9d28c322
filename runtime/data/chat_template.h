// The Qwen ChatML chat template, rendered in code (no Jinja engine) exactly as the models' own
// chat_template does for text conversations, tool definitions and tool calls included (Qwen3 and
// Qwen3.5 variants), and the loss mask that trains assistant turns only: everything the assistant
// generates after its "<|im_start|>assistant\n" header (its text and tool calls), up to and
// including its "<|im_end|>", unless the turn's weight is 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/data/tokenizer.h"

namespace deltatune {

enum class ChatTemplateKind { kQwen3, kQwen35 };

// One function call of an assistant turn, in the forms the two templates print.
struct ChatToolCall {
    std::string name;
    // Qwen3 prints `arguments` itself when it is a string, else its JSON (Python's json.dumps).
    std::string arguments_text;
    // Qwen3.5 prints one <parameter=name> per key of the arguments object, objects and arrays as
    // JSON and other values as Python's str() does (True, None, 1.5).
    std::vector<std::pair<std::string, std::string>> parameters;
    std::string parameters_error;  // why there are none (Qwen3.5 then refuses the conversation)
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;
    std::string reasoning_content;  // optional; assistant only
    bool has_reasoning_content = false;
    std::vector<ChatToolCall> tool_calls;  // assistant only
    bool trained = true;                   // assistant only: false for "weight": 0
};

// A piece of text rendered without a chat template, trained or not.
struct ChatTextSegment {
    std::string text;
    bool trained = false;
};

struct ChatConversation {
    std::vector<ChatMessage> messages;
    std::vector<std::string> tools;  // each tool definition as the templates print it (JSON)
    // Text without a chat template ("text" lines, prompt/completion strings): these segments in
    // order. A conversation has messages or segments, not both.
    std::vector<ChatTextSegment> plain;
};

struct RenderedChat {
    std::string text;
    // Byte ranges [begin, end) of `text` that are trained (assistant generations).
    std::vector<std::pair<size_t, size_t>> trained;
};

// Renders a conversation. Unknown roles, a system message that is not first, or (Qwen3.5) a
// conversation with no user query are InvalidArgument, as the templates raise.
absl::StatusOr<RenderedChat> render_chat(const ChatConversation& chat, ChatTemplateKind kind);

// Renders and tokenizes a conversation into a Document: labels equal input_ids on tokens that
// overlap a trained byte range and -100 elsewhere (Hugging Face's assistant-mask rule).
absl::StatusOr<Document> tokenize_chat(const Tokenizer& tokenizer, const ChatConversation& chat,
                                       ChatTemplateKind kind);

}  // namespace deltatune
