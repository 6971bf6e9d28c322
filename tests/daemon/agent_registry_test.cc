// AgentRegistry: agents prove who they are with their registration's secret, a live agent's
// hostname cannot be registered away, what an agent says of itself is validated, and the
// registry stays bounded (LOST entries expire).
#include <catch2/catch.hpp>

#include <thread>

#include "daemon/agents/agent_registry.h"

namespace deltatune::daemon {
namespace {

using namespace std::chrono_literals;

v1::AgentInfo node(const std::string& host) {
    v1::AgentInfo info;
    info.set_hostname(host);
    info.set_address("10.0.0.1");
    info.set_cpu_ranks(4);
    return info;
}

TEST_CASE("agents authenticate with their registration's secret", "[daemon][agents]") {
    AgentRegistry agents(1s, 10s);
    auto a = agents.register_agent(node("node-a"));
    REQUIRE(a.ok());
    CHECK(a->agent_secret().size() == 32);
    CHECK(agents.authenticate(a->agent_id(), a->agent_secret()).ok());
    CHECK(absl::IsPermissionDenied(agents.authenticate(a->agent_id(), "")));
    CHECK(absl::IsPermissionDenied(agents.authenticate(a->agent_id(), std::string(32, '0'))));
    CHECK(absl::IsNotFound(agents.authenticate("agent-0000", a->agent_secret())));
    for (const v1::Agent& listed : agents.list()) {
        CHECK(listed.SerializeAsString().find(a->agent_secret()) == std::string::npos);
    }
}

TEST_CASE("a live agent's hostname is not registered away from it", "[daemon][agents]") {
    AgentRegistry agents(10ms, 100ms);
    auto a = agents.register_agent(node("node-a"));
    REQUIRE(a.ok());
    const absl::Status taken = agents.register_agent(node("node-a")).status();
    CHECK(absl::IsAlreadyExists(taken));
    CHECK(std::string(taken.message()).find(a->agent_id()) != std::string::npos);
    CHECK(agents.authenticate(a->agent_id(), a->agent_secret()).ok());  // still there
    // The agent itself registers again with its secret: its entry is replaced.
    auto again = agents.register_agent(node("node-a"), a->agent_secret());
    REQUIRE(again.ok());
    CHECK(absl::IsNotFound(agents.authenticate(a->agent_id(), a->agent_secret())));
    CHECK(again->agent_secret() != a->agent_secret());
    // Once it is LOST anyone may take the hostname (a restarted agent has no secret).
    std::this_thread::sleep_for(150ms);
    auto next = agents.register_agent(node("node-a"));
    REQUIRE(next.ok());
    CHECK(agents.list().size() == 1);
}

TEST_CASE("what the agents say of themselves is bounded in all", "[daemon][agents]") {
    AgentRegistry agents(100ms, 500ms);
    v1::AgentInfo big = node("big");
    for (int i = 0; i < 256; ++i) {  // the most one agent may say: 256 GPUs of long names
        v1::AgentGpu* gpu = big.add_gpus();
        gpu->set_index(i);
        gpu->set_name(std::string(256, 'g'));
    }
    size_t registered = 0;
    absl::Status s;
    for (; s.ok(); ++registered) {
        big.set_hostname("big-" + std::to_string(registered));
        s = agents.register_agent(big).status();
    }
    CHECK(absl::IsResourceExhausted(s));
    CHECK(registered < AgentRegistry::kMaxAgents);
    v1::ListAgentsResponse listed;
    for (const v1::Agent& a : agents.list()) *listed.add_agents() = a;
    CHECK(listed.ByteSizeLong() < size_t{4} << 20);
}

TEST_CASE("what an agent says of itself is validated", "[daemon][agents]") {
    AgentRegistry agents(1s, 10s);
    std::vector<v1::AgentInfo> bad;
    bad.push_back(node(std::string(1 << 20, 'x')));
    bad.push_back(node(std::string("a\0b", 3)));
    bad.push_back(node("has space"));
    bad.push_back(node(""));
    bad.push_back(node("ranks"));
    bad.back().set_cpu_ranks(2147483647);
    bad.push_back(node("negative"));
    bad.back().set_cpu_ranks(-1);
    bad.push_back(node("gpus"));
    for (int i = 0; i < 10000; ++i) bad.back().add_gpus()->set_index(i);
    bad.push_back(node("repeated"));
    bad.back().add_gpus()->set_index(0);
    bad.back().add_gpus()->set_index(0);
    bad.push_back(node("address"));
    bad.back().set_address(std::string(300, 'a'));
    for (const v1::AgentInfo& info : bad) {
        INFO(info.hostname().substr(0, 20));
        CHECK(absl::IsInvalidArgument(agents.register_agent(info).status()));
    }
    CHECK(agents.list().empty());
    v1::AgentInfo fine = node("gpu-node.cluster_1");
    for (int i = 0; i < 8; ++i) {
        v1::AgentGpu* g = fine.add_gpus();
        g->set_index(i);
        g->set_name("NVIDIA H200");
        g->set_memory_bytes(int64_t{141} << 30);
    }
    CHECK(agents.register_agent(fine).ok());
}

TEST_CASE("an agent that says goodbye is gone at once", "[daemon][agents]") {
    AgentRegistry agents(1s, 10s);
    auto a = agents.register_agent(node("node-a"));
    REQUIRE(a.ok());
    REQUIRE(agents.poll(a->agent_id(), /*draining=*/true).has_value());
    CHECK(agents.is_alive(a->agent_id()));
    REQUIRE(agents.poll(a->agent_id(), true, /*leaving=*/true).has_value());
    CHECK_FALSE(agents.is_alive(a->agent_id()));
    CHECK(agents.list().empty());
    CHECK(agents.alive_agents().empty());
    CHECK_FALSE(agents.poll(a->agent_id()).has_value());  // a late poll: register again
    CHECK(agents.register_agent(node("node-a")).ok());    // its hostname is free again
}

TEST_CASE("the registry is bounded and forgets agents long LOST", "[daemon][agents]") {
    AgentRegistry agents(100ms, 500ms, /*expiry=*/1000ms);
    for (size_t i = 0; i < AgentRegistry::kMaxAgents; ++i) {
        REQUIRE(agents.register_agent(node("n" + std::to_string(i))).ok());
    }
    CHECK(absl::IsResourceExhausted(agents.register_agent(node("one-more")).status()));
    std::this_thread::sleep_for(1100ms);  // every entry LOST past its expiry
    CHECK(agents.list().empty());
    CHECK(agents.register_agent(node("one-more")).ok());
    CHECK(agents.list().size() == 1);
}

}  // namespace
}  // namespace deltatune::daemon
