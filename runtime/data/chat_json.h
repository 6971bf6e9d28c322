// Reading one line of a JSONL text dataset into a ChatConversation. Chat lines:
//   {"messages": [{"role", "content", ...}, ...], "tools": [...]}
// - content: a string, null (read as ""), or OpenAI's content parts [{"type": "text", "text": ...}]
//   (their texts joined, as Qwen3.5's template does; images and other parts are refused);
// - assistant turns: "reasoning_content", "tool_calls" ([{"function": {"name", "arguments"}}] or
//   [{"name", "arguments"}], arguments an object or, as OpenAI writes them, a string holding one),
//   and "weight" (0 or 1: whether the turn is trained);
// - "tools": the tool definitions, printed into the system turn as the templates do.
// Other shapes people bring: ShareGPT ({"conversations": [{"from", "value"}], "system", "tools"},
// roles system/human/gpt/function_call/observation), TRL's prompt/completion (message lists
// through the template, the completion trained; strings as plain text, the completion and an
// <|endoftext|> trained) and {"text": ...} (plain text and <|endoftext|>, all trained).
// Tool definitions and arguments are printed as the Hugging Face templates print them (Python's
// json.dumps with the keys in input order), so rendering needs no JSON library.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/data/chat_template.h"
#include "runtime/data/jsonl_reader.h"

namespace deltatune {

// The keys that make a line one of the shapes above (prompt/completion lines have both).
inline constexpr std::array<std::string_view, 4> kChatLineKeys = {"messages", "conversations",
                                                                  "prompt", "text"};

// nullopt when the line is a good conversation (then `out` holds it); else why not, with the
// message index and field in the detail ("messages[2].tool_calls[0].function.name is missing").
std::optional<LineError> parse_chat_line(std::string_view text, ChatConversation& out);

// Python's repr() of a double (what json.dumps and str() print): "1.0", "0.1", "1e-05", "1e+16".
std::string python_float_repr(double value);

}  // namespace deltatune
