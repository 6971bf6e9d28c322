// Jobs with resources.nodes placed on node agents (daemon/jobs/remote_placement.cc) through the
// real AgentRegistry, with the agents' side played by the test: it registers, polls for orders
// and reports exits as `deltatuned agent` would.
#include <catch2/catch.hpp>

#include "daemon/agents/agent_registry.h"
#include "tests/daemon/daemon_test_util.h"

namespace deltatune::daemon::testing {
namespace {

using namespace std::chrono_literals;

v1::JobSpec two_node_spec(const std::string& output) {
    v1::JobSpec s = fake_spec(output);
    s.mutable_resources()->set_cpu_ranks(4);
    s.mutable_resources()->set_nodes(2);
    s.set_max_restarts(3);
    return s;
}

std::string register_node(AgentRegistry& agents, const std::string& host, int cpu_ranks) {
    v1::AgentInfo info;
    info.set_hostname(host);
    info.set_cpu_ranks(cpu_ranks);
    auto r = agents.register_agent(info);
    REQUIRE(r.ok());
    return r->agent_id();
}

// Polls an agent's mailbox until `pred` holds on what arrived (or 5 s pass).
v1::AgentPollResponse poll_until(AgentRegistry& agents, const std::string& id,
                                 std::function<bool(const v1::AgentPollResponse&)> pred) {
    v1::AgentPollResponse all;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!pred(all) && std::chrono::steady_clock::now() < deadline) {
        auto got = agents.poll(id);
        REQUIRE(got.has_value());
        all.MergeFrom(*got);
        std::this_thread::sleep_for(10ms);
    }
    return all;
}

bool has_launch(const v1::AgentPollResponse& r) {
    return r.launches_size() > 0;
}

v1::RemoteRankExit exit_of(const Job& job, int rank, int code) {
    v1::RemoteRankExit e;
    e.set_job(job.name().substr(5));
    e.set_attempt(job.attempt());
    e.set_rank(rank);
    e.set_exit_code(code);
    return e;
}

// node-a and node-b with two CPU ranks each, and a 4-rank job placed on them (its orders taken).
struct PlacedJob {
    std::string a, b;
    Job job;
};
PlacedJob place_two_node_job(TestDaemon& d, AgentRegistry& agents) {
    PlacedJob p;
    p.a = register_node(agents, "node-a", 2);
    p.b = register_node(agents, "node-b", 2);
    Job created;
    REQUIRE(create(d, two_node_spec("o"), &created).ok());
    poll_until(agents, p.a, has_launch);
    poll_until(agents, p.b, has_launch);
    p.job = wait_state(d, created.name(), Job::PENDING);
    REQUIRE(p.job.state() == Job::PENDING);
    return p;
}

TEST_CASE("a job with resources.nodes waits for agents, then is placed node-major",
          "[daemon][agents]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    AgentRegistry agents(1s, 5s);
    d.manager().set_remote_ranks(&agents);
    // One agent, registered before the job so the scheduler's first look already sees it: too
    // few, so the job stays QUEUED and says why, once.
    const std::string b = register_node(agents, "node-b", 2);
    Job job;
    REQUIRE(create(d, two_node_spec("o"), &job).ok());
    Job waiting = wait_for(d, job.name(), [&](const Job&) {
        return !all_events(d, job.name(), "WAITING_FOR_AGENTS").empty();
    });
    CHECK(waiting.state() == Job::QUEUED);
    const auto said = all_events(d, job.name(), "WAITING_FOR_AGENTS");
    REQUIRE(said.size() == 1);
    CHECK(said[0].message() ==
          "waiting for 2 node agents with 2 free CPU rank(s) each; 1 of the 1 alive have room");
    // A second node: placed, ranks 0-1 on node-a (sorted by hostname), 2-3 on node-b.
    const std::string a = register_node(agents, "node-a", 3);
    const v1::AgentPollResponse to_a = poll_until(agents, a, has_launch);
    const v1::AgentPollResponse to_b = poll_until(agents, b, has_launch);
    REQUIRE(to_a.launches_size() == 1);
    REQUIRE(to_b.launches_size() == 1);
    CHECK(std::vector<int>(to_a.launches(0).ranks().begin(), to_a.launches(0).ranks().end()) ==
          std::vector<int>{0, 1});
    CHECK(std::vector<int>(to_b.launches(0).ranks().begin(), to_b.launches(0).ranks().end()) ==
          std::vector<int>{2, 3});
    CHECK(to_a.launches(0).world() == 4);
    v1::JobSpec sent;
    REQUIRE(sent.ParseFromString(to_a.launches(0).spec()));
    CHECK(sent.resources().nodes() == 2);
    CHECK(to_a.launches(0).write_roots_size() == 1);
    const Job placed = wait_state(d, job.name(), Job::PENDING);
    CHECK(placed.state() == Job::PENDING);
    const auto admitted = all_events(d, job.name(), "ADMITTED");
    REQUIRE(admitted.size() == 1);
    CHECK(admitted[0].details().at("placement") == "node-a: ranks 0-1; node-b: ranks 2-3");
    // Cancel: both agents are told to stop the attempt; their exits end it.
    v1::CancelJobRequest cancel;
    cancel.set_name(job.name());
    Job cancelled;
    REQUIRE(d.stub().CancelJob(ctx().get(), cancel, &cancelled).ok());
    for (const std::string& id : {a, b}) {
        const auto orders = poll_until(
            agents, id, [](const v1::AgentPollResponse& r) { return r.terminates_size() > 0; });
        REQUIRE(orders.terminates_size() == 1);
        CHECK(orders.terminates(0).attempt() == 0);
        CHECK(orders.terminates(0).grace_ms() > 0);
    }
    for (int rank = 0; rank < 4; ++rank) {
        d.manager().on_remote_rank_exit(rank < 2 ? a : b, exit_of(placed, rank, 0));
    }
    CHECK(wait_state(d, job.name(), Job::CANCELLED).state() == Job::CANCELLED);
}

TEST_CASE("exits come only from the agent that runs the rank; a fault relaunches",
          "[daemon][agents]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    AgentRegistry agents(1s, 5s);
    d.manager().set_remote_ranks(&agents);
    const auto [a, b, placed] = place_two_node_job(d, agents);
    const Job& job = placed;
    // Rank 0 runs on node-a: node-b cannot end it, nor can an unknown agent.
    d.manager().on_remote_rank_exit(b, exit_of(placed, 0, 1));
    d.manager().on_remote_rank_exit("agent-unknown", exit_of(placed, 0, 1));
    std::this_thread::sleep_for(200ms);
    CHECK(get(d, job.name()).state() == Job::PENDING);
    CHECK_FALSE(d.manager().placed_on(b, job.name(), 0, 0));
    CHECK(d.manager().placed_on(b, job.name(), 0, 3));
    CHECK(d.manager().placed_on(a, job.name(), 0, -1));
    d.manager().on_remote_rank_exit(a, exit_of(placed, 0, 1));
    const Job recovering = wait_state(d, job.name(), Job::RECOVERING);
    CHECK(recovering.state() == Job::RECOVERING);
    // node-0 sorts first, but a relaunch keeps the job on the nodes it ran on.
    const std::string other = register_node(agents, "node-0", 2);
    for (int rank = 1; rank < 4; ++rank) {
        d.manager().on_remote_rank_exit(rank < 2 ? a : b, exit_of(placed, rank, -1));
    }
    // Attempt 1 placed again on both (after the terminate orders of attempt 0).
    const auto again = poll_until(agents, a, [](const v1::AgentPollResponse& r) {
        for (const auto& l : r.launches()) {
            if (l.attempt() == 1) return true;
        }
        return false;
    });
    CHECK(again.terminates_size() >= 1);
    for (const auto& l : again.launches()) {
        if (l.attempt() == 1) CHECK(l.ranks(0) == 0);  // node-a keeps ranks 0-1
    }
    CHECK(agents.poll(other)->launches_size() == 0);
    CHECK(wait_for(d, job.name(), [](const Job& j) { return j.attempt() == 1; }).attempt() == 1);
}

TEST_CASE("an agent that stops heartbeating faults its jobs with AGENT_LOST", "[daemon][agents]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    AgentRegistry agents(250ms, 1s);  // short, yet long enough for a loaded CI machine
    d.manager().set_remote_ranks(&agents);
    const auto [a, b, job] = place_two_node_job(d, agents);
    // node-b goes silent; node-a keeps polling and is told to stop at once.
    const auto orders = poll_until(
        agents, a, [](const v1::AgentPollResponse& r) { return r.terminates_size() > 0; });
    REQUIRE(orders.terminates_size() == 1);
    CHECK(orders.terminates(0).grace_ms() == 0);
    const auto faults = all_events(d, job.name(), "FAULT_DETECTED");
    REQUIRE(faults.size() == 1);
    CHECK(faults[0].details().at("kind") == "AGENT_LOST");
    CHECK_THAT(faults[0].message(), Catch::Contains("node agent node-b"));
    // node-a's ranks exit; the job waits for a second agent with room (node-b is LOST).
    const Job now = get(d, job.name());
    for (int rank = 0; rank < 2; ++rank) {
        d.manager().on_remote_rank_exit(a, exit_of(now, rank, -1));
    }
    const Job waiting = wait_for(d, job.name(), [&](const Job&) {
        return !all_events(d, job.name(), "WAITING_FOR_AGENTS").empty();
    });
    CHECK(waiting.state() == Job::RECOVERING);
    agents.poll(a);
}

TEST_CASE("a draining agent's job checkpoints and moves, without a fault", "[daemon][agents]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    AgentRegistry agents(1s, 5s);
    d.manager().set_remote_ranks(&agents);
    const auto [a, b, job] = place_two_node_job(d, agents);
    const std::string c = register_node(agents, "node-c", 2);
    REQUIRE(agents.poll(b, /*draining=*/true).has_value());
    const Job told = wait_for(d, job.name(), [&](const Job&) {
        return !all_events(d, job.name(), "AGENT_DRAINING").empty();
    });
    CHECK_THAT(all_events(d, job.name(), "AGENT_DRAINING")[0].message(),
               Catch::Contains("node agent node-b is shutting down"));
    v1::RankReport report;
    report.set_job(job.name());
    report.set_attempt(0);
    report.set_rank(3);
    CHECK(d.manager().on_rank_report(report).action() == v1::RankDirective::CHECKPOINT_AND_EXIT);
    for (int rank = 0; rank < 4; ++rank) {
        d.manager().on_remote_rank_exit(rank < 2 ? a : b, exit_of(told, rank, 0));
    }
    // Placed again on node-a and node-c (node-b takes nothing new), as attempt 1, no fault.
    const auto to_c = poll_until(agents, c, has_launch);
    REQUIRE(to_c.launches_size() == 1);
    CHECK(to_c.launches(0).attempt() == 1);
    CHECK(std::vector<int>(to_c.launches(0).ranks().begin(), to_c.launches(0).ranks().end()) ==
          std::vector<int>{2, 3});
    const auto to_b = agents.poll(b, true);
    CHECK(to_b->launches_size() == 0);
    CHECK(all_events(d, job.name(), "FAULT_DETECTED").empty());
    CHECK(all_events(d, job.name(), "RELOCATING").size() == 1);
    const Job moved = wait_for(d, job.name(), [](const Job& j) { return j.attempt() == 1; });
    CHECK(moved.attempt() == 1);
}

}  // namespace
}  // namespace deltatune::daemon::testing
