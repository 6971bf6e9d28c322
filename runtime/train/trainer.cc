// The rank's training loop (see trainer.h).
#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/tokenizer.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/train_state.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

// Every training (or eval) file, addressed by one global document index.
struct Corpus {
    std::vector<TokenizedDataset> files;
    std::vector<int64_t> first_doc;  // global index of each file's first document
    int64_t trained_tokens = 0;      // labels other than -100

    std::vector<int64_t> lengths() const {
        std::vector<int64_t> out;
        for (const auto& f : files) {
            const auto l = f.lengths();
            out.insert(out.end(), l.begin(), l.end());
        }
        return out;
    }
    Document piece(const Segment& s) const {
        size_t f = 0;
        while (f + 1 < files.size() && first_doc[f + 1] <= s.doc) ++f;
        return files[f].document(s.doc - first_doc[f], s.begin, s.end);
    }
    int64_t tokens() const {
        int64_t n = 0;
        for (const auto& f : files) n += f.total_tokens();
        return n;
    }
};

struct Loaded {
    HfModel model;
    std::unique_ptr<Tokenizer> tokenizer;
    Corpus train, eval;
};

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

// DATA_LOADED: sizes, and the lines bad_lines: skip dropped, per file and by reason.
TrainerEvent data_loaded_event(const Corpus& train, const std::vector<std::string>& files) {
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
    if (skipped > 0) {
        e.level = "WARNING";
        e.message = absl::StrCat(skipped, " bad line(s) skipped (bad_lines: skip)");
    }
    return e;
}

absl::StatusOr<Loaded> load_inputs(const TrainConfig& c, const TrainerHooks& hooks) {
    Loaded in;
    DT_ASSIGN_OR_RETURN(in.model, load_hf_model(c.model_dir));
    hooks.on_event({"MODEL_LOADED",
                    "INFO",
                    c.model_dir,
                    {{"parameters", double(in.model.params.numel())}},
                    {}});
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
        DT_ASSIGN_OR_RETURN(DatasetFormat detected, detect_dataset_format(f));
        needs_tokenizer |= detected == DatasetFormat::kChat;
    }
    if (needs_tokenizer) {
        DT_ASSIGN_OR_RETURN(in.tokenizer,
                            Tokenizer::load(c.tokenizer.empty() ? c.model_dir : c.tokenizer));
        ChatTemplateKind kind = in.tokenizer->vocab_size() >= 248000 ? ChatTemplateKind::kQwen35
                                                                     : ChatTemplateKind::kQwen3;
        if (!c.chat_template.empty()) {
            DT_ASSIGN_OR_RETURN(kind, parse_chat_template_kind(c.chat_template));
        }
        options.chat = make_chat_tokenizer(*in.tokenizer, kind);
    }
    DT_ASSIGN_OR_RETURN(in.train, load_corpus(c.train_files, c, options));
    hooks.on_event(data_loaded_event(in.train, c.train_files));
    if (!c.eval_files.empty()) {
        DT_ASSIGN_OR_RETURN(in.eval, load_corpus(c.eval_files, c, options));
    }
    return in;
}

absl::StatusOr<PackedBatch> assemble(const Corpus& corpus, const PackedBin& bin, int64_t vocab) {
    std::vector<Document> docs;
    for (const auto& s : bin.segments) docs.push_back(corpus.piece(s));
    if (docs.empty()) return PackedBatch{{}, {}, {}, {0}};
    return pack_documents(docs, vocab);
}

// Token-weighted mean loss of a corpus (forward only), packed deterministically.
absl::StatusOr<double> evaluate(TrainEngine& engine, const Corpus& eval, const TrainConfig& c,
                                int64_t vocab) {
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, 0, 1, c.overlong};
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

absl::Status check_finite(const char* what, double value, int64_t step) {
    if (std::isfinite(value)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "NON_FINITE: step ", step, ": the ", what, " is ", value,
        "; the update was not applied past it and no checkpoint or export holds it (lower "
        "hyperparameters.learning_rate, or check the data)"));
}

// The tokenizer files beside the model (or the spec's tokenizer) go with the export, so it loads
// in transformers as it is. Through the process sandbox, like every other file the trainer opens.
absl::Status copy_tokenizer_files(const TrainConfig& c, const std::string& export_dir) {
    const PathSandbox& files = process_sandbox();
    std::string tok_dir = c.tokenizer.empty() ? c.model_dir : c.tokenizer;
    absl::StatusOr<DirEntry> st = files.stat(tok_dir);
    if (!c.tokenizer.empty() && !(st.ok() && st->type == EntryType::kDirectory)) {
        tok_dir = fs::path(c.tokenizer).parent_path().string();
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                          "generation_config.json"}) {
        absl::StatusOr<std::string> text = read_file(absl::StrCat(tok_dir, "/", f));
        if (absl::IsNotFound(text.status())) continue;
        if (!text.ok()) return text.status();
        DT_RETURN_IF_ERROR(write_file_atomic(absl::StrCat(export_dir, "/", f), *text));
    }
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> train(const TrainConfig& c, const TrainerHooks& hooks) {
    if (c.max_steps <= 0)
        return absl::InvalidArgumentError(absl::StrCat("max_steps must be > 0, got ", c.max_steps));
    if (c.grad_accum <= 0) return absl::InvalidArgumentError("gradient_accumulation must be > 0");
    DT_ASSIGN_OR_RETURN(Loaded in, load_inputs(c, hooks));
    const int64_t vocab = in.model.config.vocab_size;
    ParamSet& params = in.model.params;
    LocalCommunicator local;
    std::unique_ptr<TrainEngine> engine;
    if (c.gpu.enabled) {
        GpuRankOptions gpu = c.gpu;
        gpu.tokens_per_batch = c.tokens_per_batch;
        DT_ASSIGN_OR_RETURN(engine, make_gpu_train_engine(in.model, gpu));
    } else {
        engine = make_cpu_train_engine(in.model, c.comm ? *c.comm : local);
    }
    Communicator& comm = engine->comm();
    const int world = comm.world_size(), rank = comm.rank();
    const int shards = c.data_shards > 0 ? c.data_shards : world;
    if (shards % world != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("data_shards ", shards, " is not a multiple of the world size ", world));
    }
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, c.seed, shards, c.overlong};
    DT_ASSIGN_OR_RETURN(Packer packer, Packer::create(in.train.lengths(), po));
    const std::string ckpt_root = (fs::path(c.output_dir) / "checkpoints").string();

    // Resume from the newest checkpoint that verifies; corrupt ones are reported and skipped.
    TrainState state;
    TrainResult result;
    DT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> ckpts, list_checkpoints(ckpt_root));
    if (ckpts.empty() && !c.resume_checkpoint.empty()) {
        // Named explicitly: a checkpoint that does not load is an error, not skipped.
        DT_ASSIGN_OR_RETURN(state, load_train_state(c.resume_checkpoint, engine->state_io()));
        DT_RETURN_IF_ERROR(packer.restore(state.data_cursor));
        result.latest_checkpoint = c.resume_checkpoint;
        hooks.on_event({"RESUMED",
                        "INFO",
                        c.resume_checkpoint,
                        {{"step", double(state.step)}},
                        {{"path", c.resume_checkpoint}}});
    }
    for (auto it = ckpts.rbegin(); it != ckpts.rend(); ++it) {
        auto loaded = load_train_state(it->path, engine->state_io());
        if (loaded.ok()) {
            state = *loaded;
            DT_RETURN_IF_ERROR(packer.restore(state.data_cursor));
            result.latest_checkpoint = it->path;
            hooks.on_event({"RESUMED",
                            "INFO",
                            it->path,
                            {{"step", double(state.step)}},
                            {{"path", it->path}}});
            break;
        }
        hooks.on_event({"CHECKPOINT_CORRUPT",
                        "WARNING",
                        std::string(loaded.status().message()),
                        {},
                        {{"path", it->path}, {"reason", "CHECKPOINT_CORRUPT"}}});
    }
    LrSchedule lr = c.lr;
    lr.max_steps = c.max_steps;
    const auto start = std::chrono::steady_clock::now();
    const int64_t first_step = state.step;
    hooks.on_event({"TRAINING_STARTED",
                    "INFO",
                    "",
                    {{"step", double(state.step)}, {"world_size", double(world)}},
                    {{"engine", engine->name()}, {"recompute", engine->recompute()}}});

    auto checkpoint = [&]() -> absl::Status {
        state.data_cursor = packer.cursor();
        hooks.on_event({"CHECKPOINT_STARTED", "INFO", "", {{"step", double(state.step)}}, {}});
        const auto t0 = std::chrono::steady_clock::now();
        DT_ASSIGN_OR_RETURN(CheckpointInfo info,
                            save_train_state(ckpt_root, state, engine->state_io(), comm));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        result.latest_checkpoint = info.path;
        hooks.on_event(
            {"CHECKPOINT_COMMITTED",
             "INFO",
             info.path,
             {{"step", double(info.step)}, {"bytes", double(info.bytes)}, {"seconds", seconds}},
             {{"path", info.path}, {"sha256", info.manifest_sha256}}});
        for (const auto& p : prune_checkpoints(ckpt_root, c.keep_last_n)) {
            hooks.on_event({"CHECKPOINT_PRUNED", "INFO", p, {}, {{"path", p}}});
        }
        return absl::OkStatus();
    };

    int64_t evaluated_step = -1;  // the step of the last evaluation, so the end does not repeat it
    while (state.step < c.max_steps) {
        // One optimizer step: fetch all micro-batches first so the loss is normalised by the
        // trained targets of the whole step (a token-weighted mean, as without accumulation).
        std::vector<PackedBatch> micro;
        int64_t label_tokens = 0, real_tokens = 0;
        // FNV-1a over the global step's (doc, begin, end), whatever the world size.
        uint64_t digest = 1469598103934665603ull;
        for (int64_t m = 0; m < c.grad_accum; ++m) {
            const std::vector<PackedBin> bins = packer.next_step();
            for (size_t i = 0; i < bins.size(); ++i) {
                for (const Segment& seg : bins[i].segments) {
                    for (int64_t v : {seg.doc, seg.begin, seg.end}) {
                        digest = (digest ^ static_cast<uint64_t>(v)) * 1099511628211ull;
                    }
                }
                if (static_cast<int>(i) % world != rank) continue;
                DT_ASSIGN_OR_RETURN(PackedBatch b, assemble(in.train, bins[i], vocab));
                label_tokens += b.label_tokens();
                real_tokens += b.tokens();
                micro.push_back(std::move(b));
            }
        }
        // The loss is the token-weighted mean over the global batch: every rank scales its
        // gradients by the global count, and the reduce-scatter sums them.
        double counts[2] = {static_cast<double>(label_tokens), static_cast<double>(real_tokens)};
        DT_RETURN_IF_ERROR(comm.all_reduce_sum(counts, 2));
        const auto global_labels = static_cast<int64_t>(counts[0]);
        real_tokens = static_cast<int64_t>(counts[1]);
        double loss_sum = 0;
        DT_RETURN_IF_ERROR(engine->begin_step());
        for (size_t m = 0; m < micro.size(); ++m) {
            DT_ASSIGN_OR_RETURN(const double sum, engine->forward_backward(micro[m], global_labels,
                                                                           m + 1 == micro.size()));
            loss_sum += sum;
        }
        DT_RETURN_IF_ERROR(comm.all_reduce_sum(&loss_sum, 1));
        // A NaN or infinite loss would poison the weights: stop before the update, keeping the
        // last checkpoint, rather than train on and export a NaN model.
        DT_RETURN_IF_ERROR(check_finite("loss", loss_sum, state.step + 1));
        AdamWHyper hyper = c.adamw;
        hyper.lr = lr.at(state.step + 1);
        DT_ASSIGN_OR_RETURN(const double grad_norm, engine->apply(hyper, c.max_grad_norm));
        DT_RETURN_IF_ERROR(check_finite("gradient norm", grad_norm, state.step + 1));
        ++state.step;
        state.tokens += real_tokens;
        // A step whose documents hold no trained token has no loss: NaN, never a fake 0.
        const double step_loss = global_labels ? loss_sum / static_cast<double>(global_labels)
                                               : std::numeric_limits<double>::quiet_NaN();
        if (global_labels) state.last_loss = step_loss;

        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        TrainProgress p;
        p.step = state.step;
        p.total_steps = c.max_steps;
        p.epoch = packer.epoch();
        p.tokens = state.tokens;
        p.tokens_per_second = elapsed > 0 ? static_cast<double>(state.tokens) / elapsed : 0;
        const double per_step = elapsed / static_cast<double>(state.step - first_step);
        p.eta_seconds = per_step * static_cast<double>(c.max_steps - state.step);
        p.metrics = {{"loss", step_loss},
                     {"lr", hyper.lr},
                     {"grad_norm", grad_norm},
                     {"trained_tokens", double(global_labels)}};
        const double waste =
            1.0 - static_cast<double>(real_tokens) /
                      static_cast<double>(c.grad_accum * shards * c.tokens_per_batch);
        hooks.on_event({"STEP_METRICS",
                        "INFO",
                        "",
                        {{"step", double(state.step)},
                         {"loss", step_loss},
                         {"trained_tokens", double(global_labels)},
                         {"lr", hyper.lr},
                         {"grad_norm", grad_norm},
                         {"tokens_per_second", p.tokens_per_second},
                         {"padding_waste", waste},
                         // Which document pieces this step trained on (48 bits: exact in a
                         // double), so a resumed run can be checked against an uninterrupted one.
                         {"batch_digest", static_cast<double>(digest >> 16)},
                         {"eta_seconds", p.eta_seconds}},
                        {}});
        result.last_loss = state.last_loss;
        if (!in.eval.files.empty() && c.eval_every > 0 && state.step % c.eval_every == 0) {
            DT_ASSIGN_OR_RETURN(result.last_eval_loss, evaluate(*engine, in.eval, c, vocab));
            evaluated_step = state.step;
            p.metrics["eval_loss"] = result.last_eval_loss;
            hooks.on_event({"EVAL_METRICS",
                            "INFO",
                            "",
                            {{"step", double(state.step)}, {"eval_loss", result.last_eval_loss}},
                            {}});
        }
        if (c.checkpoint_every > 0 && state.step % c.checkpoint_every == 0 &&
            state.step < c.max_steps) {
            DT_RETURN_IF_ERROR(checkpoint());
        }
        p.latest_checkpoint = result.latest_checkpoint;
        hooks.on_progress(p);
        // Ranks stop together: any rank's request (the strongest one) is everyone's.
        const StopRequest mine = hooks.poll();
        double votes[2] = {mine == StopRequest::kExitNow ? 1.0 : 0.0,
                           mine == StopRequest::kCheckpointAndExit ? 1.0 : 0.0};
        if (world > 1) DT_RETURN_IF_ERROR(comm.all_reduce_sum(votes, 2));
        const StopRequest stop = votes[0] > 0   ? StopRequest::kExitNow
                                 : votes[1] > 0 ? StopRequest::kCheckpointAndExit
                                                : StopRequest::kNone;
        if (stop == StopRequest::kExitNow) {
            result.step = state.step;
            return result;
        }
        if (stop == StopRequest::kCheckpointAndExit && state.step < c.max_steps) {
            DT_RETURN_IF_ERROR(checkpoint());
            result.step = state.step;
            return result;
        }
    }
    DT_RETURN_IF_ERROR(checkpoint());
    if (!in.eval.files.empty() && evaluated_step != state.step) {  // the last step's eval stands
        DT_ASSIGN_OR_RETURN(result.last_eval_loss, evaluate(*engine, in.eval, c, vocab));
        hooks.on_event({"EVAL_METRICS",
                        "INFO",
                        "",
                        {{"step", double(state.step)}, {"eval_loss", result.last_eval_loss}},
                        {}});
    }
    result.export_dir = (fs::path(c.output_dir) / "export").string();
    hooks.on_event(
        {"EXPORT_STARTED", "INFO", result.export_dir, {}, {{"path", result.export_dir}}});
    DT_RETURN_IF_ERROR(engine->download(params));  // collective on GPU ranks
    if (rank == 0) DT_RETURN_IF_ERROR(save_hf_model(result.export_dir, in.model));
    if (rank == 0) DT_RETURN_IF_ERROR(copy_tokenizer_files(c, result.export_dir));
    DT_RETURN_IF_ERROR(comm.barrier());  // every rank reports the export once it exists
    hooks.on_event({"EXPORT_COMPLETED",
                    "INFO",
                    result.export_dir,
                    {{"loss", result.last_loss}},
                    {{"path", result.export_dir}}});
    result.completed = true;
    result.step = state.step;
    return result;
}

}  // namespace deltatune
