// The live progress line and the end-of-job summary of `deltatune watch`
// (daemon/cli/progress_line.h), and the job line of get, list and watch without a terminal
// (daemon/cli/job_client.h).
#include <catch2/catch.hpp>

#include "daemon/cli/job_client.h"
#include "daemon/cli/progress_line.h"

namespace deltatune::cli {
namespace {

v1::Job running_job() {
    v1::Job job;
    job.set_state(v1::Job::RUNNING);
    job.mutable_start_time()->set_seconds(1000);
    auto* p = job.mutable_progress();
    p->set_step(420);
    p->set_total_steps(1000);
    p->set_tokens(4200000);
    p->mutable_estimated_end_time()->set_seconds(1000 + 4000 + 3600);
    (*job.mutable_latest_metrics())["loss"] = 2.571;
    (*job.mutable_latest_metrics())["eval_loss"] = 2.6012;
    (*job.mutable_latest_metrics())["lr"] = 3.2e-5;
    return job;
}

TEST_CASE("the progress line shows what a person watching a job wants, in the width", "[cli]") {
    const v1::Job job = running_job();
    CHECK(progress_line(job, 18729.4, 1000 + 723, 200) ==
          "[########............]  42%  step 420/1000  loss 2.5710  ETA 1:54:37  18,729 tok/s  "
          "eval 2.6012  lr 3.2e-05  elapsed 0:12:03  RUNNING");
    CHECK(progress_line(job, 0, 1723, 40).size() == 40);  // never wider than the terminal
    v1::Job fresh;
    fresh.set_state(v1::Job::QUEUED);
    CHECK(progress_line(fresh, 0, 0, 80) == "QUEUED");  // no "0/0 loss nan"
}

TEST_CASE("the job line has the step, the losses and the reason, and no 0/0", "[cli]") {
    v1::Job job = running_job();
    job.set_name("jobs/3c35ed3775ed");
    CHECK(job_line(job) ==
          "jobs/3c35ed3775ed        RUNNING     step 420/1000  loss 2.5710  eval 2.6012");
    v1::Job fresh;
    fresh.set_name("jobs/3c35ed3775ed");
    fresh.set_state(v1::Job::QUEUED);
    fresh.set_queue_position(2);
    CHECK(job_line(fresh) == "jobs/3c35ed3775ed        QUEUED       queue #2");
    fresh.set_state(v1::Job::PENDING);
    CHECK(job_line(fresh) == "jobs/3c35ed3775ed        PENDING");  // no trailing padding
    // The name people gave the job, cut to keep the line one line.
    fresh.mutable_spec()->set_display_name("sft-ultrachat");
    CHECK(job_line(fresh) == "jobs/3c35ed3775ed        sft-ultrachat PENDING");
    fresh.mutable_spec()->set_display_name(std::string(40, 'n'));
    CHECK(job_line(fresh) == "jobs/3c35ed3775ed        " + std::string(31, 'n') + "~ PENDING");
}

TEST_CASE("event lines: keys in order, whole numbers whole, bytes in units", "[cli]") {
    v1::JobEvent e;
    e.set_sequence(42);
    e.set_type("CHECKPOINT_COMMITTED");
    e.set_message("/out/step-42");
    // Inserted out of order: the wire's maps keep none.
    (*e.mutable_metrics())["step"] = 42;
    (*e.mutable_metrics())["bytes"] = 117885000;
    (*e.mutable_metrics())["seconds"] = 1.2345678;
    (*e.mutable_details())["sha256"] = "ab12";
    (*e.mutable_details())["path"] = "/out/step-42";
    CHECK(event_line(e) ==
          "    42 CHECKPOINT_COMMITTED   /out/step-42 bytes=112.4 MiB seconds=1.23457 step=42 "
          "path=/out/step-42 sha256=ab12");
    v1::JobEvent bare;
    bare.set_sequence(1);
    bare.set_type("JOB_CREATED");
    CHECK(event_line(bare) == "     1 JOB_CREATED");
}

TEST_CASE("the data line says what was loaded and what was cut to fit a batch", "[cli]") {
    v1::Job job;
    CHECK(data_line(job).empty());  // before the ranks load the data
    v1::DataSummary* d = job.mutable_data_summary();
    d->set_documents(12400);
    d->set_tokens_per_epoch(3820300);
    d->set_steps_per_epoch(200);
    CHECK(data_line(job) == "data: 12,400 documents, 3,820,300 tokens and 200 steps per epoch");
    d->set_skipped_lines(2);
    d->set_overlong(v1::OVERLONG_POLICY_TRUNCATE);
    d->set_overlong_documents(31);
    d->set_overlong_tokens_left_out(18211);
    CHECK(data_line(job) ==
          "data: 12,400 documents (2 bad lines skipped), 3,820,300 tokens and 200 steps per epoch; "
          "31 longer than tokens_per_batch truncated (18,211 tokens left out)");
}

TEST_CASE("tokens per second come from the recent updates, and restart with an attempt", "[cli]") {
    TokenRate rate(60);
    rate.add(0, 0);
    CHECK(rate.per_second() == 0);
    rate.add(10, 10000);
    rate.add(20, 30000);
    CHECK(rate.per_second() == Approx(1500));
    rate.add(100, 150000);  // the first two updates fall out of the window
    CHECK(rate.per_second() == Approx(1500));
    rate.add(110, 5000);  // a resumed attempt reports fewer tokens than before: start over
    CHECK(rate.per_second() == 0);
}

TEST_CASE("a job's end is summarised on one line", "[cli]") {
    v1::Job job = running_job();
    job.set_state(v1::Job::SUCCEEDED);
    job.mutable_end_time()->set_seconds(1000 + 1723);
    job.set_result_model("/outputs/run/export");
    CHECK(job_summary(job) ==
          "SUCCEEDED in 0:28:43: loss 2.5710, eval loss 2.6012, exported to /outputs/run/export");
    job.set_best_step(300);  // early stopping: the export holds the best step
    (*job.mutable_latest_metrics())["best_eval_loss"] = 2.5;
    CHECK(job_summary(job) ==
          "SUCCEEDED in 0:28:43: loss 2.5710, eval loss 2.6012, best eval loss 2.5000 at step 300, "
          "exported to /outputs/run/export");
    job.set_state(v1::Job::FAILED);
    job.set_state_reason("NON_FINITE");
    job.set_error_message("step 7: loss is nan");
    CHECK(job_summary(job) == "FAILED in 0:28:43: NON_FINITE: step 7: loss is nan");
    // A message that starts with its reason says it once.
    job.set_state_reason("NO_TRAINED_TOKENS");
    job.set_error_message("NO_TRAINED_TOKENS: train.jsonl: no documents");
    CHECK(job_summary(job) == "FAILED in 0:28:43: NO_TRAINED_TOKENS: train.jsonl: no documents");
    CHECK(reason_and_message(job, "  ") == "  NO_TRAINED_TOKENS: train.jsonl: no documents");
    job.set_error_message("");
    CHECK(reason_and_message(job, "  ") == "  NO_TRAINED_TOKENS");
    CHECK(format_duration(90061) == "25:01:01");
}

}  // namespace
}  // namespace deltatune::cli
