// Encoding and decoding; loading is in tokenizer_load.cc. The encoder follows the library's
// pipeline: added tokens (normalized=false) split the original text; each remaining piece is
// NFC-normalised on its own, split on normalized=true added tokens, pre-tokenized (Split regex,
// ByteLevel prefix space and regex) and each pre-token goes through the BPE model.
#include "runtime/data/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "runtime/data/normalizer.h"
#include "runtime/data/tokenizer_impl.h"
#include "runtime/data/utf8.h"

namespace deltatune {

// Buffers of one encode call, and the mapping of the piece being encoded back to the input.
struct Tokenizer::Impl::Scratch {
    std::vector<int32_t>* ids = nullptr;
    std::vector<std::pair<size_t, size_t>>* offsets = nullptr;
    std::vector<tok::AddedPiece> pieces;
    std::vector<std::pair<size_t, size_t>> words, subwords;
    std::string prefixed;
    std::string norm_buf;
    std::vector<tok::Span> align_buf;
    // The current piece: its offset in the input, its normalised text and, when normalisation
    // changed it, the input span of each normalised byte (otherwise bytes map one to one).
    size_t base = 0;
    std::string_view norm;
    const std::vector<tok::Span>* align = nullptr;

    // Input span of normalised bytes first..last (inclusive), widened to whole characters as the
    // library's byte-level alignments are.
    std::pair<size_t, size_t> map(size_t first, size_t last) const {
        if (align) return {base + (*align)[first].first, base + (*align)[last].second};
        auto continuation = [&](size_t i) {
            return (static_cast<unsigned char>(norm[i]) & 0xC0) == 0x80;
        };
        size_t b = first, e = last + 1;
        while (b > 0 && continuation(b)) --b;
        while (e < norm.size() && continuation(e)) ++e;
        return {base + b, base + e};
    }
};

absl::Status Tokenizer::Impl::encode(std::string_view text, std::vector<int32_t>& ids,
                                     std::vector<std::pair<size_t, size_t>>* offsets) const {
    if (std::optional<size_t> bad = first_invalid_utf8(text)) {
        return absl::InvalidArgumentError(
            absl::StrCat("encode: invalid UTF-8 at byte offset ", *bad,
                         " (sanitize_utf8 replaces ill-formed sequences with U+FFFD)"));
    }
    Scratch s;
    s.ids = &ids;
    s.offsets = offsets;
    if (added.empty(false)) return encode_piece(text, 0, s);
    std::vector<tok::AddedPiece> top;
    added.split(text, false, top);
    for (const tok::AddedPiece& p : top) {
        if (p.id >= 0) {
            ids.push_back(p.id);
            if (offsets) offsets->emplace_back(p.begin, p.end);
            continue;
        }
        if (absl::Status st = encode_piece(text.substr(p.begin, p.end - p.begin), p.begin, s);
            !st.ok()) {
            return st;
        }
    }
    return absl::OkStatus();
}

absl::Status Tokenizer::Impl::encode_piece(std::string_view piece, size_t base, Scratch& s) const {
    const bool changed =
        nfc && tok::nfc_normalize(piece, &s.norm_buf, s.offsets ? &s.align_buf : nullptr);
    s.base = base;
    s.norm = changed ? std::string_view(s.norm_buf) : piece;
    s.align = changed && s.offsets ? &s.align_buf : nullptr;
    if (added.empty(true)) return pre_tokenize(s.norm, 0, s.norm.size(), s);
    added.split(s.norm, true, s.pieces);
    for (const tok::AddedPiece& p : s.pieces) {
        if (p.id >= 0) {
            s.ids->push_back(p.id);
            if (s.offsets) s.offsets->push_back(s.map(p.begin, p.end - 1));
            continue;
        }
        if (absl::Status st = pre_tokenize(s.norm, p.begin, p.end, s); !st.ok()) return st;
    }
    return absl::OkStatus();
}

absl::Status Tokenizer::Impl::pre_tokenize(std::string_view norm, size_t from, size_t to,
                                           Scratch& s) const {
    if (from == to) return absl::OkStatus();
    const std::string_view sub = norm.substr(from, to - from);
    s.words.clear();
    if (split) {
        if (absl::Status st = split->split(sub, s.words); !st.ok()) return st;
    } else {
        s.words.emplace_back(0, sub.size());
    }
    for (const auto& [wb, we] : s.words) {
        const std::string_view word = sub.substr(wb, we - wb);
        // ByteLevel's prefix space stands in front of the word and maps to its first character.
        const bool prefixed = add_prefix_space && word[0] != ' ';
        std::string_view text = word;
        if (prefixed) {
            s.prefixed.assign(1, ' ');
            s.prefixed.append(word);
            text = s.prefixed;
        }
        s.subwords.clear();
        if (byte_level_regex) {
            if (absl::Status st = byte_level_regex->split(text, s.subwords); !st.ok()) return st;
        } else {
            s.subwords.emplace_back(0, text.size());
        }
        const size_t word_pos = from + wb;
        for (const auto& [b, e] : s.subwords) {
            const size_t first = s.ids->size();
            if (absl::Status st = model->tokenize(text.substr(b, e - b), *s.ids); !st.ok()) {
                return absl::InvalidArgumentError(absl::StrCat("encode: ", st.message()));
            }
            if (!s.offsets) continue;
            size_t pos = b;
            for (size_t k = first; k < s.ids->size(); ++k) {
                const size_t len = model->token_bytes((*s.ids)[k])->size();
                size_t lo = pos, hi = pos + len - 1;
                if (prefixed) {
                    lo = lo == 0 ? 0 : lo - 1;
                    hi = hi == 0 ? 0 : hi - 1;
                }
                s.offsets->push_back(s.map(word_pos + lo, word_pos + hi));
                pos += len;
            }
        }
    }
    return absl::OkStatus();
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::vector<int32_t>> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (absl::Status st = impl_->encode(text, ids, nullptr); !st.ok()) return st;
    return ids;
}

absl::StatusOr<Tokenizer::Encoding> Tokenizer::encode_with_offsets(std::string_view text) const {
    Encoding enc;
    if (absl::Status st = impl_->encode(text, enc.ids, &enc.offsets); !st.ok()) return st;
    return enc;
}

absl::StatusOr<std::string> Tokenizer::decode(const std::vector<int32_t>& ids,
                                              bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) {
        const auto kind = id >= 0 && id < impl_->vocab_size
                              ? impl_->id_kind[static_cast<size_t>(id)]
                              : static_cast<uint8_t>(Impl::kNone);
        if (kind == Impl::kNone) {
            return absl::InvalidArgumentError(absl::StrCat(
                "decode: id ", id, " is not in the vocabulary (size ", impl_->vocab_size, ")"));
        }
        if (kind == Impl::kSpecial && skip_special_tokens) continue;
        if (kind == Impl::kModel) {
            bytes += *impl_->model->token_bytes(id);
        } else {
            bytes += impl_->added_bytes.at(id);
        }
    }
    // The ByteLevel decoder joins the bytes and decodes them lossily, as from_utf8_lossy does.
    return sanitize_utf8(bytes);
}

int64_t Tokenizer::vocab_size() const {
    return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = impl_->added_ids.find(token);
    if (it != impl_->added_ids.end()) return it->second;
    return impl_->model->token_to_id(token);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
    return impl_->added_tokens;
}

const std::string& Tokenizer::fingerprint() const {
    return impl_->fingerprint;
}

}  // namespace deltatune
