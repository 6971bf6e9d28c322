// What the trainer reads and writes around its loop (see trainer_inputs.h).
#include "runtime/train/trainer_inputs.h"

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_template_source.h"
#include "runtime/data/tokenizer.h"
#include "runtime/distributed/communicator.h"
#include "runtime/optim/sharded_optimizer.h"
#include "runtime/train/checkpoint_export.h"
#include "runtime/train/train_state.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

// The tokenizer's path (a folder or a tokenizer.json): the spec's, or the model's folder.
std::string tokenizer_path(const TrainConfig& c) {
    return c.tokenizer.empty() ? c.model_dir : c.tokenizer;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int64_t trained_tokens(const TokenizedDataset& d) {
    int64_t n = 0;
    for (int64_t doc = 0; doc < d.size(); ++doc) {
        for (int32_t label : d.labels(doc)) n += label != -100;
    }
    return n;
}

// Loads every file; a corpus with no document, or none with a trained token (chat data with no
// assistant turn, labels all -100), would train nothing and is refused naming its files.
absl::StatusOr<Corpus> load_corpus(const std::vector<std::string>& files, const TrainConfig& c,
                                   const DatasetOptions& options) {
    Corpus corpus;
    int64_t docs = 0;
    for (const auto& path : files) {
        DT_ASSIGN_OR_RETURN(TokenizedDataset d, load_dataset(path, options));
        corpus.first_doc.push_back(docs);
        docs += d.size();
        corpus.trained_tokens += trained_tokens(d);
        corpus.files.push_back(std::move(d));
    }
    const std::string names = absl::StrJoin(files, ", ");
    if (docs == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("NO_TRAINED_TOKENS: ", names, ": no documents (every line skipped?)"));
    }
    if (corpus.trained_tokens == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NO_TRAINED_TOKENS: ", names, ": ", docs,
            " documents but not one trained token (chat data without an assistant turn, or "
            "every label -100)"));
    }
    return corpus;
}

// Documents longer than tokens_per_batch, and the tokens the over-long policy leaves out.
void add_overlong(TrainerEvent& e, const Corpus& train, const TrainConfig& c) {
    int64_t docs = 0, lost = 0;
    for (const int64_t len : train.lengths()) {
        if (len <= c.tokens_per_batch) continue;
        ++docs;
        if (c.overlong == OverlongPolicy::kTruncate) lost += len - c.tokens_per_batch;
        if (c.overlong == OverlongPolicy::kDrop) lost += len;
    }
    e.metrics["overlong_documents"] = double(docs);
    e.metrics["overlong_tokens_left_out"] = double(lost);
    if (docs == 0) return;
    const char* policy = overlong_policy_name(c.overlong);
    e.details["overlong"] = absl::StrCat(
        docs, " document(s) longer than tokens_per_batch (", c.tokens_per_batch, "): ", policy,
        lost > 0 ? absl::StrCat(", ", lost, " tokens left out") : std::string());
}

// With train weights: each file's documents and weight, and the documents an epoch takes.
void add_mixture(TrainerEvent& e, const Corpus& train, const std::vector<std::string>& files,
                 const std::vector<double>& weights) {
    if (weights.empty() || weights.size() != train.files.size()) return;
    std::string text;
    double per_epoch = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        const double docs = static_cast<double>(train.files[i].size());
        const double whole = std::floor(weights[i]);
        per_epoch += whole * docs + std::round((weights[i] - whole) * docs);
        absl::StrAppend(&text, text.empty() ? "" : ", ", files[i], " x", weights[i], " (",
                        train.files[i].size(), " documents)");
    }
    e.details["mixture"] = text;
    e.metrics["documents_per_epoch"] = per_epoch;
}

// DATA_LOADED: sizes, the lines bad_lines: skip dropped (per file and by reason), and the
// documents the over-long policy touched.
TrainerEvent data_loaded_event(const Corpus& train, const std::vector<std::string>& files,
                               const TrainConfig& c) {
    TrainerEvent e{"DATA_LOADED", "INFO", "", {}, {}};
    int64_t skipped = 0;
    for (size_t i = 0; i < train.files.size(); ++i) {
        const BadLineCounts& counts = train.files[i].counts();
        skipped += counts.skipped;
        if (counts.skipped == 0) continue;
        std::string why;
        for (const auto& [reason, n] : counts.by_reason) {
            absl::StrAppend(&why, why.empty() ? "" : ", ", reason, " ", n);
        }
        e.details[absl::StrCat("skipped_lines:", files[i])] =
            absl::StrCat(counts.skipped, " of ", counts.lines, " lines (", why, ")");
    }
    e.metrics = {{"num_samples", double(train.lengths().size())},
                 {"num_tokens", double(train.tokens())},
                 {"trained_tokens", double(train.trained_tokens)},
                 {"skipped_lines", double(skipped)}};
    add_overlong(e, train, c);
    add_mixture(e, train, files, c.train_weights);
    if (skipped > 0) {
        e.level = "WARNING";
        e.message = absl::StrCat(skipped, " bad line(s) skipped (bad_lines: skip)");
    }
    return e;
}

}  // namespace

absl::StatusOr<Loaded> load_train_inputs(const TrainConfig& c, const TrainerHooks& hooks) {
    Loaded in;
    const auto t0 = std::chrono::steady_clock::now();
    // Ranks read their shards from the files when the engine is made: GPU ranks stream them to
    // the device, CPU ranks keep theirs in host memory (a LoRA base or world size 1: the whole).
    DT_ASSIGN_OR_RETURN(in.model, open_hf_model(c.model_dir));
    hooks.on_event(
        {"MODEL_LOADED",
         "INFO",
         c.model_dir,
         {{"parameters", double(in.model.params.numel())}, {"seconds", seconds_since(t0)}},
         {{"weights",
           c.gpu.enabled ? "streamed to the GPU shards" : "read into the rank's shard"}}});
    const auto t1 = std::chrono::steady_clock::now();
    if (c.lora) {
        in.adapters = make_lora_params(in.model.config, in.model.params, *c.lora);
        init_lora_params(in.adapters, c.seed);
    }
    DatasetOptions options;
    options.format = c.format;
    options.bad_lines = c.bad_lines;
    options.vocab_size = in.model.config.vocab_size;
    options.max_line_bytes = static_cast<size_t>(c.max_document_bytes);
    options.max_document_tokens = c.max_document_tokens;
    options.cache_dir = (fs::path(c.output_dir) / "cache").string();
    // Chat data needs the tokenizer; pre-tokenized data does not.
    bool needs_tokenizer = c.format == DatasetFormat::kChat;
    for (const auto& f : c.train_files) {
        if (c.format != DatasetFormat::kAuto) break;
        DT_ASSIGN_OR_RETURN(DatasetFormat detected,
                            detect_dataset_format(f, static_cast<size_t>(c.max_document_bytes)));
        needs_tokenizer |= detected == DatasetFormat::kChat;
    }
    if (needs_tokenizer) {
        DT_ASSIGN_OR_RETURN(in.tokenizer, Tokenizer::load(tokenizer_path(c)));
        DT_ASSIGN_OR_RETURN(const ChatTemplateKind kind,
                            chat_template_for(*in.tokenizer, tokenizer_path(c), c.chat_template));
        options.chat = make_chat_tokenizer(*in.tokenizer, kind);
    }
    DT_ASSIGN_OR_RETURN(in.train, load_corpus(c.train_files, c, options));
    TrainerEvent loaded = data_loaded_event(in.train, c.train_files, c);
    loaded.metrics["seconds"] = seconds_since(t1);
    hooks.on_event(loaded);
    if (!c.eval_files.empty()) {
        DT_ASSIGN_OR_RETURN(in.eval, load_corpus(c.eval_files, c, options));
    }
    return in;
}

absl::StatusOr<std::vector<MixtureGroup>> training_mixture(const Corpus& corpus,
                                                           const std::vector<double>& weights) {
    if (weights.empty()) return std::vector<MixtureGroup>{};
    if (weights.size() != corpus.first_doc.size()) {
        return absl::InvalidArgumentError(absl::StrCat(weights.size(), " train weights for ",
                                                       corpus.first_doc.size(), " train files"));
    }
    std::vector<MixtureGroup> groups;
    bool all_one = true;
    for (size_t i = 0; i < weights.size(); ++i) {
        groups.push_back({corpus.first_doc[i], weights[i]});
        all_one &= weights[i] == 1.0;
    }
    if (all_one) groups.clear();
    return groups;
}

absl::StatusOr<Packer> make_train_packer(const TrainConfig& c, const Corpus& train, int shards) {
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, c.seed, shards, c.overlong, {}};
    DT_ASSIGN_OR_RETURN(po.mixture, training_mixture(train, c.train_weights));
    return Packer::create(train.lengths(), po);
}

absl::StatusOr<TrainingLength> train_length_of(const TrainConfig& c, const Packer& packer) {
    return training_length({c.max_steps, c.num_epochs, c.lr.warmup_steps, c.warmup_ratio},
                           packer.steps_in_epoch(), c.grad_accum);
}

uint64_t batch_digest_add(uint64_t digest, const Segment& s) {
    for (int64_t v : {s.doc, s.begin, s.end}) {
        digest = (digest ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    }
    return digest;
}

absl::StatusOr<PackedBatch> assemble(const Corpus& corpus, const PackedBin& bin, int64_t vocab) {
    std::vector<Document> docs;
    for (const auto& s : bin.segments) docs.push_back(corpus.piece(s));
    if (docs.empty()) return PackedBatch{{}, {}, {}, {0}};
    return pack_documents(docs, vocab);
}

absl::StatusOr<double> evaluate_corpus(TrainEngine& engine, const Corpus& eval,
                                       const TrainConfig& c, int64_t vocab) {
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, 0, 1, c.overlong, {}};
    DT_ASSIGN_OR_RETURN(Packer packer, Packer::create(eval.lengths(), po));
    double sum = 0;
    int64_t count = 0;
    for (int64_t s = 0; s < packer.steps_in_epoch(); ++s) {
        const auto bins = packer.next_step();
        DT_ASSIGN_OR_RETURN(PackedBatch b, assemble(eval, bins[0], vocab));
        if (b.label_tokens() == 0) continue;
        DT_ASSIGN_OR_RETURN(LossResult r, engine.evaluate(b));
        sum += r.loss_sum;
        count += r.label_tokens;
    }
    return count ? sum / static_cast<double>(count) : 0.0;
}

namespace {

// The export's tokenizer, loaded on first use and at most once: both the template choice and the
// generation config may need it (null: it does not load, so the export has no chat side).
class ExportTokenizer {
  public:
    explicit ExportTokenizer(std::string dir) : dir_(std::move(dir)) {}
    const Tokenizer* get() {
        if (!tried_) {
            tried_ = true;
            absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(dir_);
            if (t.ok()) tokenizer_ = *std::move(t);
        }
        return tokenizer_.get();
    }

  private:
    std::string dir_;
    bool tried_ = false;
    std::unique_ptr<Tokenizer> tokenizer_;
};

// GenerationConfig.from_model_config's essentials: the special token ids of the exported
// config.json (top level, or a multimodal config's text_config); with a chat template (`chat`),
// eos also holds "<|im_end|>", which ends an assistant turn, so generation stops there. Nothing
// when the config names none.
absl::Status write_generation_config(const std::string& export_dir, bool chat,
                                     ExportTokenizer& tokenizer) {
    absl::StatusOr<std::string> read = read_file(export_dir + "/config.json");
    if (absl::IsNotFound(read.status())) return absl::OkStatus();  // an adapter: the base's serves
    DT_ASSIGN_OR_RETURN(const std::string text, std::move(read));
    const nlohmann::ordered_json config = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!config.is_object()) return absl::OkStatus();
    nlohmann::ordered_json out = {{"_from_model_config", true}};
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
        if (config.contains(key)) {
            out[key] = config[key];
        } else if (config.contains("text_config") && config["text_config"].contains(key)) {
            out[key] = config["text_config"][key];
        }
    }
    if (chat) {
        const Tokenizer* loaded = tokenizer.get();
        const std::optional<int32_t> im_end =
            loaded != nullptr ? loaded->token_to_id("<|im_end|>") : std::nullopt;
        if (im_end) {
            nlohmann::ordered_json eos = nlohmann::ordered_json::array({*im_end});
            const nlohmann::ordered_json& was = out.contains("eos_token_id")
                                                    ? out["eos_token_id"]
                                                    : nlohmann::ordered_json::array();
            for (const auto& id : was.is_array() ? was : nlohmann::ordered_json::array({was})) {
                if (id != *im_end) eos.push_back(id);
            }
            out["eos_token_id"] = eos;
        }
    }
    if (out.size() == 1) return absl::OkStatus();
    return write_file_atomic(export_dir + "/generation_config.json", out.dump(2) + "\n");
}

// Writes the built-in template training used as the export's chat_template.jinja (and drops a
// different one from its tokenizer_config.json) unless the base's own template served; returns
// whether the export carries a chat template.
absl::StatusOr<bool> write_trained_chat_template(const TrainConfig& c, const std::string& tok_dir,
                                                 const std::string& export_dir,
                                                 ExportTokenizer& tokenizer) {
    DT_ASSIGN_OR_RETURN(const std::optional<std::string> carried,
                        read_carried_chat_template(tok_dir));
    if (carried && c.chat_template.empty()) return true;  // trained with the base's own
    int64_t vocab = 0;
    if (c.chat_template.empty()) {  // no template anywhere: the vocabulary's, as training chose
        const Tokenizer* loaded = tokenizer.get();
        if (loaded == nullptr) return false;  // no tokenizer, no chat
        vocab = loaded->vocab_size();
    }
    DT_ASSIGN_OR_RETURN(const ChatTemplateKind kind,
                        choose_chat_template(vocab, c.chat_template, std::nullopt));
    DT_RETURN_IF_ERROR(write_file_atomic(export_dir + "/chat_template.jinja",
                                         std::string(builtin_chat_template_text(kind))));
    absl::StatusOr<std::string> config = read_file(export_dir + "/tokenizer_config.json");
    if (!config.ok()) return true;
    nlohmann::ordered_json json = nlohmann::ordered_json::parse(*config, nullptr, false);
    if (json.is_object() && json.erase("chat_template") > 0) {
        DT_RETURN_IF_ERROR(
            write_file_atomic(export_dir + "/tokenizer_config.json", json.dump(2) + "\n"));
    }
    return true;
}

}  // namespace

// The tokenizer files beside the model (or the spec's tokenizer) go with the export, so it loads
// in transformers as it is, with the chat template training used: the base's own when it carries
// one and the job named none (choose_chat_template accepted it), else the built-in one's text.
// Through the process sandbox, like every other file the trainer opens.
absl::Status copy_tokenizer_files(const TrainConfig& c, const std::string& export_dir) {
    const std::string tok_dir = tokenizer_folder_of(tokenizer_path(c));
    bool have_generation_config = false;
    for (const char* f :
         {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
          "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
          "generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json"}) {
        absl::StatusOr<std::string> text = read_file(absl::StrCat(tok_dir, "/", f));
        if (absl::IsNotFound(text.status())) continue;
        if (!text.ok()) return text.status();
        DT_RETURN_IF_ERROR(write_file_atomic(absl::StrCat(export_dir, "/", f), *text));
        have_generation_config |= std::string_view(f) == "generation_config.json";
    }
    ExportTokenizer tokenizer(export_dir);
    DT_ASSIGN_OR_RETURN(const bool templated,
                        write_trained_chat_template(c, tok_dir, export_dir, tokenizer));
    return have_generation_config ? absl::OkStatus()
                                  : write_generation_config(export_dir, templated, tokenizer);
}

absl::StatusOr<std::unique_ptr<TrainEngine>> make_cpu_engine_for(const TrainConfig& c,
                                                                 HfModel& model, Communicator& comm,
                                                                 ParamSet& adapters) {
    if (!c.lora) return make_cpu_train_engine(model, comm);
    return make_cpu_train_engine(model, comm, &adapters, c.lora->scale());
}

absl::Status write_export(const TrainConfig& c, const HfModel& model, const ParamSet& adapters,
                          const ParamBytes& values, const std::string& dir, bool write_files) {
    if (!c.lora) {  // every rank takes part: `values` may gather
        SaveOptions o;
        o.write_files = write_files;
        DT_RETURN_IF_ERROR(save_hf_model(dir, model, values, o));
    } else if (!write_files) {
        return absl::OkStatus();
    } else if (c.lora_merged_export) {
        DT_RETURN_IF_ERROR(
            save_hf_model(dir, model, merged_lora_bytes(model, adapters, c.lora->scale())));
    } else {
        DT_RETURN_IF_ERROR(save_peft_adapter(dir, *c.lora, adapters, model, c.model_dir));
    }
    return write_files ? copy_tokenizer_files(c, dir) : absl::OkStatus();
}

absl::StatusOr<int64_t> export_checkpoint(const TrainConfig& c, const std::string& checkpoint_dir,
                                          const std::string& out_dir) {
    if (!c.lora) {  // the masters straight from the rank files, a piece at a time
        DT_ASSIGN_OR_RETURN(const HfModel model, open_hf_model(c.model_dir));
        DT_ASSIGN_OR_RETURN(const CheckpointMasters masters,
                            open_checkpoint_masters(model, checkpoint_dir));
        DT_RETURN_IF_ERROR(write_export(c, model, {}, masters.values, out_dir, true));
        return masters.state.step;
    }
    // LoRA: the adapter from the optimizer's state files; the base is only opened (a merged
    // export streams it), never read whole.
    DT_ASSIGN_OR_RETURN(HfModel model, open_hf_model(c.model_dir));
    LocalCommunicator comm;
    ParamSet adapters = make_lora_params(model.config, model.params, *c.lora);
    ShardedOptimizer optimizer = ShardedOptimizer::create(adapters, &comm);
    DT_ASSIGN_OR_RETURN(const TrainState state,
                        load_train_state(checkpoint_dir, optimizer.state_io()));
    DT_RETURN_IF_ERROR(write_export(c, model, adapters, nullptr, out_dir, true));
    return state.step;
}

}  // namespace deltatune
