// tokenize_chat: rendered conversation -> Document with the assistant loss mask. Kept apart from
// the renderer so code that only renders does not link the tokenizer.
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_template.h"

namespace deltatune {

absl::StatusOr<Document> tokenize_chat(const Tokenizer& tokenizer, const ChatConversation& chat,
                                       ChatTemplateKind kind) {
    DT_ASSIGN_OR_RETURN(RenderedChat rendered, render_chat(chat, kind));
    DT_ASSIGN_OR_RETURN(Tokenizer::Encoding enc, tokenizer.encode_with_offsets(rendered.text));
    Document doc;
    doc.input_ids = enc.ids;
    doc.labels.assign(enc.ids.size(), -100);
    // Spans and tokens are both in text order: one merge-like pass marks overlapping tokens.
    size_t span = 0;
    for (size_t t = 0; t < enc.ids.size(); ++t) {
        const auto [begin, end] = enc.offsets[t];
        while (span < rendered.trained.size() && rendered.trained[span].second <= begin) ++span;
        if (span < rendered.trained.size() && rendered.trained[span].first < end && begin < end)
            doc.labels[t] = enc.ids[t];
    }
    return doc;
}

}  // namespace deltatune
