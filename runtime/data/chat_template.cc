// Qwen3 / Qwen3.5 ChatML rendering in code, mirroring the models' Jinja chat_template line by line
// for text conversations with or without tools, and the assistant loss mask.
#include "runtime/data/chat_template.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

namespace {

constexpr char kThinkOpen[] = "<think>";
constexpr char kThinkClose[] = "</think>";

// Length of the Unicode whitespace code point at s[i] (Python's str.isspace set), or 0.
size_t whitespace_at(const std::string& s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
    if (c == 0xc2 && (at(1) == 0x85 || at(1) == 0xa0)) return 2;
    if (c == 0xe1 && at(1) == 0x9a && at(2) == 0x80) return 3;  // U+1680
    if (c == 0xe3 && at(1) == 0x80 && at(2) == 0x80) return 3;  // U+3000
    if (c == 0xe2 && at(1) == 0x80 &&
        (at(2) <= 0x8a || at(2) == 0xa8 || at(2) == 0xa9 || at(2) == 0xaf)) {
        return at(2) >= 0x80 ? 3 : 0;  // U+2000..U+200A, U+2028, U+2029, U+202F
    }
    if (c == 0xe2 && at(1) == 0x81 && at(2) == 0x9f) return 3;  // U+205F
    return 0;
}

// Jinja's `trim` filter: Python str.strip() with Unicode whitespace.
std::string trim(const std::string& s) {
    size_t begin = 0;
    while (begin < s.size()) {
        const size_t n = whitespace_at(s, begin);
        if (n == 0) break;
        begin += n;
    }
    // Walk forward remembering the end of the last non-whitespace code point.
    size_t end = begin, i = begin;
    while (i < s.size()) {
        const size_t n = whitespace_at(s, i);
        if (n > 0) {
            i += n;
            continue;
        }
        ++i;
        while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) ++i;
        end = i;
    }
    return s.substr(begin, end - begin);
}

std::string strip_newlines(std::string s, bool left, bool right) {
    if (right) {
        while (!s.empty() && s.back() == '\n') s.pop_back();
    }
    if (left) {
        size_t k = 0;
        while (k < s.size() && s[k] == '\n') ++k;
        s.erase(0, k);
    }
    return s;
}

bool starts_ends_with_tool_response(const std::string& s) {
    return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

// Splits an assistant turn that writes its reasoning inline: "<think>r</think>answer".
void split_inline_reasoning(std::string& content, std::string& reasoning) {
    const std::string before = content.substr(0, content.find(kThinkClose));
    const size_t open = before.rfind(kThinkOpen);
    reasoning = strip_newlines(
        open == std::string::npos ? before : before.substr(open + std::strlen(kThinkOpen)), true,
        true);
    content = strip_newlines(content.substr(content.rfind(kThinkClose) + std::strlen(kThinkClose)),
                             true, false);
}

// The last index whose message is a real user query (not a wrapped tool response), or -1.
int64_t last_query_index(const std::vector<ChatMessage>& m, ChatTemplateKind kind) {
    for (int64_t i = static_cast<int64_t>(m.size()) - 1; i >= 0; --i) {
        if (m[i].role != "user") continue;
        const std::string c = kind == ChatTemplateKind::kQwen35 ? trim(m[i].content) : m[i].content;
        if (!starts_ends_with_tool_response(c)) return i;
    }
    return -1;
}

class Renderer {
  public:
    void text(const std::string& s) { out_.text += s; }
    void trained(const std::string& s) {
        out_.trained.emplace_back(out_.text.size(), out_.text.size() + s.size());
        out_.text += s;
    }
    RenderedChat take() { return std::move(out_); }

  private:
    RenderedChat out_;
};

// The assistant turn: header untrained; the generation and its <|im_end|> trained (unless the
// turn's weight is 0).
void render_assistant(Renderer& r, const std::string& generation, bool trained) {
    r.text("<|im_start|>assistant\n");
    if (trained) {
        r.trained(generation + "<|im_end|>");
    } else {
        r.text(generation + "<|im_end|>");
    }
    r.text("\n");
}

std::string tool_list(const std::vector<std::string>& tools) {
    std::string out;
    for (const std::string& tool : tools) out += "\n" + tool;
    return out;
}

// The system turn that lists the tools (Qwen3), with the conversation's system text first.
void render_qwen3_tools(Renderer& r, const ChatConversation& chat) {
    r.text("<|im_start|>system\n");
    if (chat.messages.front().role == "system") r.text(chat.messages.front().content + "\n\n");
    r.text(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>" +
        tool_list(chat.tools) +
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

// Qwen3.5's tool list, with the conversation's system text after it.
void render_qwen35_tools(Renderer& r, const ChatConversation& chat) {
    r.text("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>" +
           tool_list(chat.tools) +
           "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format "
           "with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter="
           "example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis "
           "is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n"
           "</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow "
           "the specified format: an inner <function=...></function> block must be nested within "
           "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may "
           "provide optional reasoning for your function call in natural language BEFORE the "
           "function call, but NOT after\n- If there is no function call available, answer the "
           "question like normal with your current knowledge and do not tell the user about "
           "function calls\n</IMPORTANT>");
    if (chat.messages.front().role == "system") {
        const std::string content = trim(chat.messages.front().content);
        if (!content.empty()) r.text("\n\n" + content);
    }
    r.text("<|im_end|>\n");
}

// Qwen3's tool calls: JSON objects in <tool_call> tags, a newline before each but a first that
// follows no text.
std::string qwen3_tool_calls(const std::vector<ChatToolCall>& calls, bool after_text) {
    std::string out;
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i > 0 || after_text) out += "\n";
        out += "<tool_call>\n{\"name\": \"" + calls[i].name +
               "\", \"arguments\": " + calls[i].arguments_text + "}\n</tool_call>";
    }
    return out;
}

// Qwen3.5's tool calls: <function=...> blocks with one <parameter=...> per argument.
std::string qwen35_tool_calls(const std::vector<ChatToolCall>& calls, bool after_text) {
    std::string out;
    for (size_t i = 0; i < calls.size(); ++i) {
        out += i > 0 ? "\n" : (after_text ? "\n\n" : "");
        out += "<tool_call>\n<function=" + calls[i].name + ">\n";
        for (const auto& [name, value] : calls[i].parameters)
            out += "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
        out += "</function>\n</tool_call>";
    }
    return out;
}

absl::StatusOr<RenderedChat> render_qwen35(const ChatConversation& chat) {
    const std::vector<ChatMessage>& m = chat.messages;
    Renderer r;
    if (!chat.tools.empty()) {
        render_qwen35_tools(r, chat);
    } else if (m.front().role == "system") {
        r.text("<|im_start|>system\n" + trim(m.front().content) + "<|im_end|>\n");
    }
    const int64_t last_query = last_query_index(m, ChatTemplateKind::kQwen35);
    if (last_query < 0) return absl::InvalidArgumentError("No user query found in messages.");
    for (size_t i = 0; i < m.size(); ++i) {
        std::string content = trim(m[i].content);
        const std::string& role = m[i].role;
        if (role == "system") {
            if (i != 0)
                return absl::InvalidArgumentError("System message must be at the beginning.");
        } else if (role == "user") {
            r.text("<|im_start|>user\n" + content + "<|im_end|>\n");
        } else if (role == "assistant") {
            std::string reasoning;
            if (m[i].has_reasoning_content) {
                reasoning = m[i].reasoning_content;
            } else if (content.find(kThinkClose) != std::string::npos) {
                split_inline_reasoning(content, reasoning);
            }
            reasoning = trim(reasoning);
            for (const ChatToolCall& call : m[i].tool_calls) {
                if (!call.parameters_error.empty()) {
                    return absl::InvalidArgumentError(
                        absl::StrCat("tool call '", call.name, "': ", call.parameters_error));
                }
            }
            std::string generation = static_cast<int64_t>(i) > last_query
                                         ? "<think>\n" + reasoning + "\n</think>\n\n" + content
                                         : content;
            generation += qwen35_tool_calls(m[i].tool_calls, !trim(content).empty());
            render_assistant(r, generation, m[i].trained);
        } else if (role == "tool") {
            // As the template: `loop.previtem` is undefined for the first message.
            if (i > 0 && m[i - 1].role != "tool") r.text("<|im_start|>user");
            r.text("\n<tool_response>\n" + content + "\n</tool_response>");
            if (i + 1 == m.size() || m[i + 1].role != "tool") r.text("<|im_end|>\n");
        } else {
            return absl::InvalidArgumentError(
                absl::StrCat("Unexpected message role '", role, "'."));
        }
    }
    return r.take();
}

absl::StatusOr<RenderedChat> render_qwen3(const ChatConversation& chat) {
    const std::vector<ChatMessage>& m = chat.messages;
    Renderer r;
    if (!chat.tools.empty()) {
        render_qwen3_tools(r, chat);
    } else if (m.front().role == "system") {
        r.text("<|im_start|>system\n" + m.front().content + "<|im_end|>\n");
    }
    int64_t last_query = last_query_index(m, ChatTemplateKind::kQwen3);
    if (last_query < 0) last_query = static_cast<int64_t>(m.size()) - 1;
    for (size_t i = 0; i < m.size(); ++i) {
        const std::string& role = m[i].role;
        if (role == "user" || (role == "system" && i != 0)) {
            r.text("<|im_start|>" + role + "\n" + m[i].content + "<|im_end|>\n");
        } else if (role == "assistant") {
            std::string content = m[i].content, reasoning;
            if (m[i].has_reasoning_content) {
                reasoning = m[i].reasoning_content;
            } else if (content.find(kThinkClose) != std::string::npos) {
                split_inline_reasoning(content, reasoning);
            }
            const bool last = i + 1 == m.size();
            std::string generation =
                static_cast<int64_t>(i) > last_query && (last || !reasoning.empty())
                    ? "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
                          strip_newlines(content, true, false)
                    : content;
            generation += qwen3_tool_calls(m[i].tool_calls, !content.empty());
            render_assistant(r, generation, m[i].trained);
        } else if (role == "tool") {
            if (i == 0 || m[i - 1].role != "tool") r.text("<|im_start|>user");
            r.text("\n<tool_response>\n" + m[i].content + "\n</tool_response>");
            if (i + 1 == m.size() || m[i + 1].role != "tool") r.text("<|im_end|>\n");
        } else if (role != "system") {
            // The Qwen3 template renders nothing for other roles; refuse rather than drop data.
            return absl::InvalidArgumentError(
                absl::StrCat("Unexpected message role '", role, "'."));
        }
    }
    return r.take();
}

}  // namespace

absl::StatusOr<RenderedChat> render_chat(const ChatConversation& chat, ChatTemplateKind kind) {
    if (!chat.plain.empty()) {
        Renderer r;
        for (const ChatTextSegment& s : chat.plain) s.trained ? r.trained(s.text) : r.text(s.text);
        return r.take();
    }
    if (chat.messages.empty()) return absl::InvalidArgumentError("No messages provided.");
    return kind == ChatTemplateKind::kQwen35 ? render_qwen35(chat) : render_qwen3(chat);
}

}  // namespace deltatune
