// Chat lines: JSON -> ChatConversation, with tool definitions and arguments printed as the Hugging
// Face templates print them (transformers' `tojson` is Python's json.dumps with ensure_ascii off,
// keys in input order; Jinja's `string` filter is Python's str()).
#include "runtime/data/chat_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace deltatune {
namespace {

using Json = nlohmann::ordered_json;  // keeps the input's key order, as Python's dict does

// Ends a text document or a string completion (Qwen's document separator), so the model learns
// to stop.
constexpr char kEndOfText[] = "<|endoftext|>";

LineError bad_message(const std::string& where, const std::string& what) {
    return LineError{"bad message", absl::StrCat(where, what)};
}

void append_python_string(std::string& out, const std::string& s) {
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

// json.dumps(value, ensure_ascii=False): ", " and ": " separators, floats as Python's repr.
void append_python_json(std::string& out, const Json& j) {
    switch (j.type()) {
        case Json::value_t::object: {
            out += '{';
            const char* sep = "";
            for (const auto& [key, value] : j.items()) {
                out += sep;
                sep = ", ";
                append_python_string(out, key);
                out += ": ";
                append_python_json(out, value);
            }
            out += '}';
            return;
        }
        case Json::value_t::array: {
            out += '[';
            const char* sep = "";
            for (const Json& value : j) {
                out += sep;
                sep = ", ";
                append_python_json(out, value);
            }
            out += ']';
            return;
        }
        case Json::value_t::string:
            append_python_string(out, j.get_ref<const std::string&>());
            return;
        case Json::value_t::boolean:
            out += j.get<bool>() ? "true" : "false";
            return;
        case Json::value_t::number_integer:
            absl::StrAppend(&out, j.get<int64_t>());
            return;
        case Json::value_t::number_unsigned:
            absl::StrAppend(&out, j.get<uint64_t>());
            return;
        case Json::value_t::number_float:
            out += python_float_repr(j.get<double>());
            return;
        default:
            out += "null";
            return;
    }
}

std::string python_json(const Json& j) {
    std::string out;
    append_python_json(out, j);
    return out;
}

// Python's str() of a JSON scalar (Jinja's `string` filter): strings as they are, True, None.
std::string python_str(const Json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
    if (j.is_null()) return "None";
    return python_json(j);
}

// The text of a message's content: a string, null, or content parts of type text.
std::optional<LineError> read_content(const Json& m, const std::string& where, std::string& out) {
    auto c = m.find("content");
    if (c == m.end()) {
        if (m.value("role", "") == "assistant") return std::nullopt;  // a tool-call turn
        return bad_message(where, ".content is missing");
    }
    if (c->is_null()) return std::nullopt;
    if (c->is_string()) {
        out = c->get<std::string>();
        return std::nullopt;
    }
    if (!c->is_array()) {
        return bad_message(where, ".content is neither a string nor a list of content parts");
    }
    for (size_t k = 0; k < c->size(); ++k) {
        const Json& part = (*c)[k];
        const std::string at = absl::StrCat(where, ".content[", k, "]");
        if (!part.is_object()) return bad_message(at, " is not an object");
        const std::string type = part.contains("type") && part["type"].is_string()
                                     ? part["type"].get<std::string>()
                                     : "";
        if (part.contains("image") || part.contains("image_url") || part.contains("video") ||
            type == "image" || type == "video") {
            return LineError{"unsupported content",
                             absl::StrCat(at, " is an image or video: training reads text only")};
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
            return bad_message(at, " has no \"text\" string");
        }
        out += text->get<std::string>();
    }
    return std::nullopt;
}

// Qwen3.5's parameters from the arguments (an object, or a string holding one).
void read_parameters(const Json& arguments, ChatToolCall& call) {
    Json object = arguments;
    if (arguments.is_string()) {
        object = Json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    }
    if (!object.is_object()) {
        call.parameters_error = "arguments is neither an object nor a string holding one";
        return;
    }
    for (const auto& [name, value] : object.items()) {
        call.parameters.emplace_back(
            name, value.is_object() || value.is_array() ? python_json(value) : python_str(value));
    }
}

std::optional<LineError> read_tool_calls(const Json& calls, const std::string& where,
                                         std::vector<ChatToolCall>& out) {
    if (calls.is_null()) return std::nullopt;
    if (!calls.is_array()) return bad_message(where, ".tool_calls is not a list");
    for (size_t k = 0; k < calls.size(); ++k) {
        const std::string at = absl::StrCat(where, ".tool_calls[", k, "]");
        if (!calls[k].is_object()) return bad_message(at, " is not an object");
        const bool nested = calls[k].contains("function");
        const Json& fn = nested ? calls[k]["function"] : calls[k];
        const std::string fn_at = nested ? at + ".function" : at;
        if (!fn.is_object()) return bad_message(fn_at, " is not an object");
        auto name = fn.find("name");
        if (name == fn.end() || !name->is_string()) {
            return bad_message(fn_at, ".name is missing or not a string");
        }
        auto arguments = fn.find("arguments");
        if (arguments == fn.end() || arguments->is_null()) {
            return bad_message(fn_at, ".arguments is missing");
        }
        ChatToolCall call;
        call.name = name->get<std::string>();
        call.arguments_text =
            arguments->is_string() ? arguments->get<std::string>() : python_json(*arguments);
        read_parameters(*arguments, call);
        out.push_back(std::move(call));
    }
    return std::nullopt;
}

std::optional<LineError> read_assistant_fields(const Json& m, const std::string& where,
                                               ChatMessage& msg) {
    if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
        if (!r->is_string()) return bad_message(where, ".reasoning_content is not a string");
        msg.reasoning_content = r->get<std::string>();
        msg.has_reasoning_content = true;
    }
    if (auto calls = m.find("tool_calls"); calls != m.end()) {
        if (auto e = read_tool_calls(*calls, where, msg.tool_calls)) return e;
    }
    if (auto w = m.find("weight"); w != m.end()) {
        if (!w->is_number_integer() || (w->get<int64_t>() != 0 && w->get<int64_t>() != 1)) {
            return bad_message(where, absl::StrCat(".weight is ", w->dump(), ", not 0 or 1"));
        }
        msg.trained = w->get<int64_t>() == 1;
    }
    return std::nullopt;
}

std::optional<LineError> read_message(const Json& m, const std::string& where, ChatMessage& msg) {
    if (!m.is_object()) return bad_message(where, " is not an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
        return bad_message(where, ".role is missing or not a string");
    }
    msg.role = role->get<std::string>();
    if (auto e = read_content(m, where, msg.content)) return e;
    if (msg.role == "assistant") return read_assistant_fields(m, where, msg);
    for (const char* key : {"tool_calls", "weight"}) {
        if (m.contains(key) && !m[key].is_null()) {
            return bad_message(where,
                               absl::StrCat(".", key, " is read on assistant messages only"));
        }
    }
    return std::nullopt;
}

std::optional<LineError> read_tools(const Json& j, std::vector<std::string>& out) {
    if (j.contains("functions")) {
        return LineError{"bad \"functions\"",
                         "the legacy \"functions\" list is not read: give the definitions as "
                         "\"tools\" ([{\"type\": \"function\", \"function\": {...}}])"};
    }
    auto it = j.find("tools");
    if (it == j.end() || it->is_null()) return std::nullopt;
    // ShareGPT exports (LLaMA-Factory) write the list as a JSON string.
    const Json tools = it->is_string() ? Json::parse(it->get<std::string>(), nullptr, false) : *it;
    if (!tools.is_array()) return LineError{"bad \"tools\"", "\"tools\" is not a list"};
    for (const Json& tool : tools) out.push_back(python_json(tool));
    return std::nullopt;
}

std::optional<LineError> read_message_list(const Json& list, const std::string& key,
                                           std::vector<ChatMessage>& out) {
    if (!list.is_array()) {
        return LineError{"bad \"" + key + "\"", "\"" + key + "\" is not an array"};
    }
    if (list.empty()) return LineError{"empty \"" + key + "\"", ""};
    for (size_t i = 0; i < list.size(); ++i) {
        ChatMessage msg;
        if (auto e = read_message(list[i], absl::StrCat(key, "[", i, "]"), msg)) return e;
        out.push_back(std::move(msg));
    }
    return std::nullopt;
}

// ShareGPT: {"conversations": [{"from": "human", "value": ...}, ...], "system": ..., "tools": ...}
// with LLaMA-Factory's tool turns (function_call values hold {"name", "arguments"}).
std::optional<LineError> read_sharegpt(const Json& j, ChatConversation& out) {
    static const std::pair<const char*, const char*> kRoles[] = {{"system", "system"},
                                                                 {"human", "user"},
                                                                 {"user", "user"},
                                                                 {"gpt", "assistant"},
                                                                 {"assistant", "assistant"},
                                                                 {"model", "assistant"},
                                                                 {"function_call", "assistant"},
                                                                 {"observation", "tool"},
                                                                 {"function_response", "tool"},
                                                                 {"tool", "tool"}};
    const Json& turns = j["conversations"];
    if (!turns.is_array()) return LineError{"bad \"conversations\"", "not an array"};
    if (turns.empty()) return LineError{"empty \"conversations\"", ""};
    if (auto s = j.find("system"); s != j.end() && s->is_string() && !s->empty()) {
        ChatMessage system;
        system.role = "system";
        system.content = s->get<std::string>();
        out.messages.push_back(std::move(system));
    }
    for (size_t k = 0; k < turns.size(); ++k) {
        const std::string where = absl::StrCat("conversations[", k, "]");
        const Json& t = turns[k];
        if (!t.is_object() || !t.contains("from") || !t["from"].is_string() ||
            !(t.contains("value") && (t["value"].is_string() || t["value"].is_null()))) {
            return bad_message(where, " needs a \"from\" string and a \"value\" string");
        }
        const std::string from = t["from"].get<std::string>();
        const auto* role = std::find_if(std::begin(kRoles), std::end(kRoles),
                                        [&](const auto& r) { return from == r.first; });
        if (role == std::end(kRoles)) {
            return bad_message(where, ".from is '" + from +
                                          "': expected system, human, gpt, function_call, "
                                          "observation or tool");
        }
        ChatMessage msg;
        msg.role = role->second;
        const std::string value = t["value"].is_null() ? "" : t["value"].get<std::string>();
        if (from == "function_call") {
            Json call = Json::parse(value, nullptr, false);
            if (call.is_object()) call = Json::array({call});
            if (!call.is_array()) return bad_message(where, ".value is not a JSON tool call");
            if (auto e = read_tool_calls(call, where, msg.tool_calls)) return e;
        } else {
            msg.content = value;
        }
        out.messages.push_back(std::move(msg));
    }
    return read_tools(j, out.tools);
}

// TRL's prompt-completion pairs: strings are trained as text (the completion and an end of text),
// message lists through the chat template (the completion's assistant turns only).
std::optional<LineError> read_prompt_completion(const Json& j, ChatConversation& out) {
    auto p = j.find("prompt"), c = j.find("completion");
    if (p == j.end() || c == j.end()) {
        return LineError{"bad prompt/completion", "a line with one needs both"};
    }
    if (p->is_string() && c->is_string()) {
        out.plain = {{p->get<std::string>(), false}, {c->get<std::string>() + kEndOfText, true}};
        return std::nullopt;
    }
    if (!p->is_array() || !c->is_array()) {
        return LineError{"bad prompt/completion", "both strings or both message lists"};
    }
    if (auto e = read_message_list(*p, "prompt", out.messages)) return e;
    for (ChatMessage& m : out.messages) m.trained = false;
    if (auto e = read_message_list(*c, "completion", out.messages)) return e;
    return read_tools(j, out.tools);
}

}  // namespace

std::string python_float_repr(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
    if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
    // The shortest round-trip digits, as Python's repr chooses them, in d.ddde[+-]x form.
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
    const std::string sci(buf, r.ptr);
    const size_t e = sci.find('e');
    std::string digits, sign;
    for (const char c : sci.substr(0, e)) {
        if (c == '-') sign = "-";
        if (c >= '0' && c <= '9') digits += c;
    }
    const int exponent = std::stoi(sci.substr(e + 1));
    const int point = exponent + 1;  // digits before the decimal point
    const int n = static_cast<int>(digits.size());
    if (point <= -4 || point > 16) {  // Python's switch to exponent notation
        std::string out = sign + digits.substr(0, 1);
        if (n > 1) out += "." + digits.substr(1);
        char exp[16];
        std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        return out + exp;
    }
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= n) return sign + digits + std::string(point - n, '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
}

std::optional<LineError> parse_chat_line(std::string_view text, ChatConversation& out) {
    Json j;
    if (auto why = parse_json_line(text, j)) return LineError{"not valid JSON", *why};
    if (!j.is_object()) return LineError{"not a JSON object", ""};
    out = ChatConversation{};
    if (j.contains("messages")) {
        if (auto e = read_message_list(j["messages"], "messages", out.messages)) return e;
        return read_tools(j, out.tools);
    }
    if (j.contains("conversations")) return read_sharegpt(j, out);
    if (j.contains("prompt") || j.contains("completion")) return read_prompt_completion(j, out);
    if (auto t = j.find("text"); t != j.end()) {
        if (!t->is_string()) return LineError{"bad \"text\"", "\"text\" is not a string"};
        out.plain = {{t->get<std::string>() + kEndOfText, true}};
        return std::nullopt;
    }
    return LineError{"missing \"messages\"",
                     "expected \"messages\", \"conversations\" (ShareGPT), \"prompt\" and "
                     "\"completion\", or \"text\""};
}

}  // namespace deltatune
