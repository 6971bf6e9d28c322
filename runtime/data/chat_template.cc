// Qwen3 / Qwen3.5 ChatML rendering in code, mirroring the models' Jinja chat_template line by line
// for conversations without tools or images, and the assistant loss mask.
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

// The assistant turn: header untrained; the generation and its <|im_end|> trained.
void render_assistant(Renderer& r, const std::string& generation) {
    r.text("<|im_start|>assistant\n");
    r.trained(generation + "<|im_end|>");
    r.text("\n");
}

absl::StatusOr<RenderedChat> render_qwen35(const std::vector<ChatMessage>& m) {
    Renderer r;
    if (m.front().role == "system")
        r.text("<|im_start|>system\n" + trim(m.front().content) + "<|im_end|>\n");
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
            if (static_cast<int64_t>(i) > last_query) {
                render_assistant(r, "<think>\n" + reasoning + "\n</think>\n\n" + content);
            } else {
                render_assistant(r, content);
            }
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

absl::StatusOr<RenderedChat> render_qwen3(const std::vector<ChatMessage>& m) {
    Renderer r;
    if (m.front().role == "system")
        r.text("<|im_start|>system\n" + m.front().content + "<|im_end|>\n");
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
            if (static_cast<int64_t>(i) > last_query && (last || !reasoning.empty())) {
                render_assistant(r, "<think>\n" + strip_newlines(reasoning, true, true) +
                                        "\n</think>\n\n" + strip_newlines(content, true, false));
            } else {
                render_assistant(r, content);
            }
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

absl::StatusOr<RenderedChat> render_chat(const std::vector<ChatMessage>& messages,
                                         ChatTemplateKind kind) {
    if (messages.empty()) return absl::InvalidArgumentError("No messages provided.");
    return kind == ChatTemplateKind::kQwen35 ? render_qwen35(messages) : render_qwen3(messages);
}

}  // namespace deltatune
