// Tokenizer::load: reads a tokenizer.json and accepts exactly the parts this implementation
// reproduces (see tokenizer.h); anything else is refused with the file and the JSON field, since
// tokenizing differently from the model's own tokenizer would silently corrupt training data.
#include <fcntl.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/normalizer.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/tokenizer_impl.h"
#include "runtime/data/tokenizer_sha256.h"
#include "runtime/data/utf8.h"

namespace deltatune {

using json = nlohmann::json;

// Parses one tokenizer.json into an Impl; each error names the file and the field.
class Tokenizer::Impl::Loader {
  public:
    Loader(const std::string& file, Tokenizer::Impl& impl) : file_(file), impl_(impl) {}

    absl::Status load(const json& root) {
        if (!root.is_object()) return error("(root)", "expected a JSON object");
        for (const char* key : {"truncation", "padding"}) {
            if (root.contains(key) && !root[key].is_null()) {
                return error(key, "unsupported: must be null (the runtime packs sequences)");
            }
        }
        if (auto st = normalizer(root); !st.ok()) return st;
        if (auto st = pre_tokenizer(root); !st.ok()) return st;
        if (auto st = model(root); !st.ok()) return st;
        if (auto st = post_processor(root); !st.ok()) return st;
        if (auto st = decoder(root); !st.ok()) return st;
        if (auto st = added_tokens(root); !st.ok()) return st;
        impl_.fingerprint = fingerprint();
        return absl::OkStatus();
    }

  private:
    absl::Status error(std::string_view field, std::string_view what) const {
        return absl::InvalidArgumentError(
            absl::StrCat(file_, ": field \"", std::string(field), "\": ", std::string(what)));
    }

    // A boolean member of `obj` (at `path`), `def` when absent.
    absl::StatusOr<bool> flag(const json& obj, const std::string& path, const char* key,
                              bool def) const {
        if (!obj.contains(key) || obj[key].is_null()) return def;
        if (!obj[key].is_boolean()) return error(path + "." + key, "expected true or false");
        return obj[key].get<bool>();
    }

    static std::string type_of(const json& obj) {
        if (!obj.is_object() || !obj.contains("type") || !obj["type"].is_string()) return "";
        return obj["type"].get<std::string>();
    }

    absl::Status normalizer(const json& root) {
        if (!root.contains("normalizer") || root["normalizer"].is_null()) return absl::OkStatus();
        const json& n = root["normalizer"];
        const std::string type = type_of(n);
        if (type == "NFC") {
            impl_.nfc = true;
            return absl::OkStatus();
        }
        if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
            const json& list = n["normalizers"];
            for (size_t i = 0; i < list.size(); ++i) {
                if (type_of(list[i]) != "NFC") {
                    return error(absl::StrCat("normalizer.normalizers[", i, "].type"),
                                 absl::StrCat("unsupported normalizer \"", type_of(list[i]),
                                              "\" (only NFC is supported)"));
                }
            }
            impl_.nfc = !list.empty();
            return absl::OkStatus();
        }
        return error("normalizer.type",
                     absl::StrCat("unsupported normalizer \"", type,
                                  "\" (supported: NFC, a Sequence of NFC, or null)"));
    }

    absl::Status pre_tokenizer(const json& root) {
        if (!root.contains("pre_tokenizer") || !root["pre_tokenizer"].is_object()) {
            return error("pre_tokenizer", "missing: a ByteLevel pre-tokenizer is required");
        }
        const json& pt = root["pre_tokenizer"];
        std::vector<std::pair<const json*, std::string>> steps;
        if (type_of(pt) == "Sequence") {
            if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array()) {
                return error("pre_tokenizer.pretokenizers", "expected an array");
            }
            for (size_t i = 0; i < pt["pretokenizers"].size(); ++i) {
                steps.emplace_back(&pt["pretokenizers"][i],
                                   absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"));
            }
        } else {
            steps.emplace_back(&pt, "pre_tokenizer");
        }
        bool byte_level = false;
        for (const auto& [step, path] : steps) {
            const std::string type = type_of(*step);
            if (byte_level) return error(path, "unsupported: nothing may follow ByteLevel");
            if (type == "Split" && !impl_.split) {
                if (auto st = split(*step, path); !st.ok()) return st;
            } else if (type == "ByteLevel") {
                byte_level = true;
                auto prefix = flag(*step, path, "add_prefix_space", true);
                auto use_regex = flag(*step, path, "use_regex", true);
                if (!prefix.ok()) return prefix.status();
                if (!use_regex.ok()) return use_regex.status();
                impl_.add_prefix_space = *prefix;
                if (*use_regex) {
                    auto re = tok::SplitRegex::compile(tok::kGpt2Pattern, false);
                    if (!re.ok())
                        return error(path + ".use_regex", std::string(re.status().message()));
                    impl_.byte_level_regex = *std::move(re);
                }
                fingerprint_parts_.push_back(absl::StrCat("ByteLevel ", *prefix, " ", *use_regex));
            } else {
                return error(path + ".type",
                             absl::StrCat("unsupported pre-tokenizer \"", type,
                                          "\" (supported: one Split, then ByteLevel)"));
            }
        }
        if (!byte_level) return error("pre_tokenizer", "a ByteLevel pre-tokenizer is required");
        return absl::OkStatus();
    }

    absl::Status split(const json& step, const std::string& path) {
        const json* pattern = step.contains("pattern") ? &step["pattern"] : nullptr;
        bool literal = false;
        std::string source;
        if (pattern && pattern->is_object() && pattern->contains("Regex") &&
            (*pattern)["Regex"].is_string()) {
            source = (*pattern)["Regex"].get<std::string>();
        } else if (pattern && pattern->is_object() && pattern->contains("String") &&
                   (*pattern)["String"].is_string()) {
            source = (*pattern)["String"].get<std::string>();
            literal = true;
        } else {
            return error(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
        }
        if (!step.contains("behavior") || step["behavior"] != "Isolated") {
            return error(path + ".behavior", "unsupported (only \"Isolated\" is supported)");
        }
        auto invert = flag(step, path, "invert", false);
        if (!invert.ok()) return invert.status();
        if (*invert) return error(path + ".invert", "unsupported (only false is supported)");
        auto re = tok::SplitRegex::compile(source, literal);
        if (!re.ok()) return error(path + ".pattern", std::string(re.status().message()));
        impl_.split = *std::move(re);
        fingerprint_parts_.push_back(absl::StrCat("Split ", literal, " ", source));
        return absl::OkStatus();
    }

    absl::Status model(const json& root) {
        if (!root.contains("model") || !root["model"].is_object()) {
            return error("model", "missing or not an object");
        }
        const json& m = root["model"];
        const std::string type = m.contains("type") ? type_of(m) : "BPE";
        if (type != "BPE") {
            return error("model.type", absl::StrCat("unsupported model type \"", type,
                                                    "\" (only BPE is supported)"));
        }
        if (!m.contains("vocab") || !m["vocab"].is_object()) {
            return error("model.vocab", "expected an object of token -> id");
        }
        tok::StringMap<int32_t> vocab;
        vocab.reserve(m["vocab"].size());
        for (const auto& [token, id] : m["vocab"].items()) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
                return error(absl::StrCat("model.vocab[\"", token, "\"]"), "expected an id");
            }
            vocab.emplace(token, id.get<int32_t>());
        }
        std::vector<std::pair<std::string, std::string>> merges;
        if (m.contains("merges") && !m["merges"].is_array()) {
            return error("model.merges", "expected an array");
        }
        const json empty = json::array();
        const json& list = m.contains("merges") ? m["merges"] : empty;
        merges.reserve(list.size());
        for (size_t i = 0; i < list.size(); ++i) {
            const json& e = list[i];
            if (e.is_string()) {
                // "a b": byte-level tokens hold no spaces, so there is exactly one.
                const std::string& s = e.get_ref<const std::string&>();
                const size_t sp = s.find(' ');
                if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
                    return error(absl::StrCat("model.merges[", i, "]"), "expected \"a b\"");
                }
                merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
            } else {
                return error(absl::StrCat("model.merges[", i, "]"),
                             "expected \"a b\" or [\"a\", \"b\"]");
            }
        }
        auto ignore_merges = flag(m, "model", "ignore_merges", false);
        auto byte_fallback = flag(m, "model", "byte_fallback", false);
        if (!ignore_merges.ok()) return ignore_merges.status();
        if (!byte_fallback.ok()) return byte_fallback.status();
        if (*byte_fallback) return error("model.byte_fallback", "unsupported (must be false)");
        if (m.contains("dropout") && !m["dropout"].is_null() &&
            !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
            return error("model.dropout", "unsupported: BPE dropout is not deterministic");
        }
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
            if (m.contains(key) && !m[key].is_null() && m[key] != "") {
                return error(absl::StrCat("model.", key), "unsupported (must be null or empty)");
            }
        }
        auto bpe = tok::BpeModel::create(std::move(vocab), merges, *ignore_merges);
        if (!bpe.ok())
            return absl::InvalidArgumentError(absl::StrCat(file_, ": ", bpe.status().message()));
        impl_.model = *std::move(bpe);
        return absl::OkStatus();
    }

    absl::Status post_processor(const json& root) {
        if (!root.contains("post_processor") || root["post_processor"].is_null()) {
            return absl::OkStatus();
        }
        const json& p = root["post_processor"];
        if (type_of(p) != "ByteLevel") {
            return error("post_processor.type",
                         absl::StrCat("unsupported post-processor \"", type_of(p),
                                      "\" (supported: null, ByteLevel without trim_offsets)"));
        }
        auto trim = flag(p, "post_processor", "trim_offsets", true);
        if (!trim.ok()) return trim.status();
        if (*trim) return error("post_processor.trim_offsets", "unsupported (must be false)");
        return absl::OkStatus();
    }

    absl::Status decoder(const json& root) {
        if (!root.contains("decoder") || type_of(root["decoder"]) != "ByteLevel") {
            const std::string type = root.contains("decoder") ? type_of(root["decoder"]) : "";
            return error("decoder.type", absl::StrCat("unsupported decoder \"", type,
                                                      "\" (only ByteLevel is supported)"));
        }
        return absl::OkStatus();
    }

    absl::Status added_tokens(const json& root) {
        const json empty = json::array();
        const json& list = root.contains("added_tokens") && !root["added_tokens"].is_null()
                               ? root["added_tokens"]
                               : empty;
        if (!list.is_array()) return error("added_tokens", "expected an array");
        std::vector<AddedToken> tokens;
        for (size_t i = 0; i < list.size(); ++i) {
            const json& t = list[i];
            const std::string path = absl::StrCat("added_tokens[", i, "]");
            if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
                t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > INT32_MAX) {
                return error(path + ".id", "expected a non-negative id");
            }
            if (!t.contains("content") || !t["content"].is_string()) {
                return error(path + ".content", "expected a string");
            }
            AddedToken a;
            a.id = t["id"].get<int32_t>();
            a.content = t["content"].get<std::string>();
            bool* flags[] = {&a.special, &a.lstrip, &a.rstrip, &a.normalized, &a.single_word};
            const char* names[] = {"special", "lstrip", "rstrip", "normalized", "single_word"};
            for (size_t k = 0; k < 5; ++k) {
                // The library's AddedToken defaults: normalized unless special.
                const bool def = k == 3 ? !a.special : false;
                auto v = flag(t, path, names[k], def);
                if (!v.ok()) return v.status();
                *flags[k] = *v;
            }
            tokens.push_back(std::move(a));
        }
        // The library matches special tokens first, then the others, each in file order.
        std::vector<AddedToken> order;
        for (int pass = 0; pass < 2; ++pass) {
            for (const AddedToken& a : tokens) {
                if (a.special == (pass == 0)) order.push_back(a);
            }
        }
        std::vector<std::string> patterns;
        for (const AddedToken& a : order) {
            std::string normalized;
            const bool changed =
                a.normalized && impl_.nfc && tok::nfc_normalize(a.content, &normalized, nullptr);
            patterns.push_back(changed ? normalized : a.content);
        }
        impl_.added.build(order, patterns);

        int64_t size = impl_.model->size();
        for (const AddedToken& a : tokens) size = std::max<int64_t>(size, int64_t{a.id} + 1);
        impl_.vocab_size = size;
        impl_.id_kind.assign(static_cast<size_t>(size), Tokenizer::Impl::kNone);
        for (int64_t id = 0; id < impl_.model->size(); ++id) {
            if (impl_.model->token_bytes(static_cast<int32_t>(id))) {
                impl_.id_kind[static_cast<size_t>(id)] = Tokenizer::Impl::kModel;
            }
        }
        std::unordered_set<std::string> specials;
        for (const AddedToken& a : tokens) {
            if (a.special) specials.insert(a.content);
        }
        for (const AddedToken& a : tokens) {
            // The library decodes a normalized token as its normalised content, and skips it as
            // special when that string is some special token's content.
            std::string text = a.content, normalized;
            if (a.normalized && impl_.nfc && tok::nfc_normalize(a.content, &normalized, nullptr)) {
                text = normalized;
            }
            impl_.id_kind[static_cast<size_t>(a.id)] =
                specials.count(text) ? Tokenizer::Impl::kSpecial : Tokenizer::Impl::kAdded;
            // The ByteLevel decoder maps an added token's characters like any other token's,
            // and keeps its UTF-8 as is when some character is no byte's stand-in.
            std::optional<std::string> bytes = tok::byte_level_decode(text);
            impl_.added_bytes[a.id] = bytes ? *bytes : text;
            impl_.added_ids.emplace(a.content, a.id);
        }
        std::sort(tokens.begin(), tokens.end(),
                  [](const AddedToken& x, const AddedToken& y) { return x.id < y.id; });
        impl_.added_tokens = std::move(tokens);
        return absl::OkStatus();
    }

    // SHA-256 over everything that decides encode and decode results, in a canonical order
    // (vocabulary by id, merges by rank, added tokens by id), so that formatting, key order and
    // merge spelling do not matter.
    std::string fingerprint() const {
        tok::Sha256 h;
        h.field("deltatune.tokenizer.v1").field(impl_.nfc ? "NFC" : "none");
        for (const std::string& p : fingerprint_parts_) h.field(p);
        const tok::BpeModel& m = *impl_.model;
        h.field(absl::StrCat("BPE ignore_merges=", m.ignore_merges()));
        std::vector<std::pair<int32_t, std::string_view>> vocab;
        vocab.reserve(m.vocab().size());
        for (const auto& [token, id] : m.vocab()) vocab.emplace_back(id, token);
        std::sort(vocab.begin(), vocab.end());
        for (const auto& [id, token] : vocab) h.field(absl::StrCat(id)).field(token);
        for (const auto& [a, b] : m.merge_pairs()) h.field(absl::StrCat(a, " ", b));
        for (const AddedToken& a : impl_.added_tokens) {
            h.field(absl::StrCat(a.id, " ", a.special, a.lstrip, a.rstrip, a.normalized,
                                 a.single_word))
                .field(a.content);
        }
        h.field("decoder ByteLevel");
        return h.hex_digest();
    }

    const std::string& file_;
    Tokenizer::Impl& impl_;
    std::vector<std::string> fingerprint_parts_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
    std::string file = path;
    absl::StatusOr<DirEntry> st = process_sandbox().stat(path);
    if (st.ok() && st->type == EntryType::kDirectory) file = path + "/tokenizer.json";
    absl::StatusOr<UniqueFd> fd = process_sandbox().open(file, O_RDONLY);
    if (!fd.ok()) {
        return absl::Status(fd.status().code(), absl::StrCat("cannot open the tokenizer file: ",
                                                             fd.status().message()));
    }
    DT_ASSIGN_OR_RETURN(std::string text, read_fd(fd->get(), file));
    json root;
    try {
        root = json::parse(text);
    } catch (const json::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": field \"(root)\": not valid JSON: ", e.what()));
    }
    auto impl = std::make_unique<Impl>();
    impl->file = file;
    if (absl::Status st = Impl::Loader(file, *impl).load(root); !st.ok()) return st;
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

}  // namespace deltatune
