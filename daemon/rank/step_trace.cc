#include "daemon/rank/step_trace.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace deltatune::daemon {

namespace {

using Spans = std::vector<std::pair<uint64_t, uint64_t>>;

// Sorted, disjoint union.
Spans merged(Spans spans) {
    std::sort(spans.begin(), spans.end());
    Spans out;
    for (const auto& s : spans) {
        if (s.second <= s.first) continue;
        if (!out.empty() && s.first <= out.back().second) {
            out.back().second = std::max(out.back().second, s.second);
        } else {
            out.push_back(s);
        }
    }
    return out;
}

#if DELTATUNE_HAVE_CUDA
StepTrace* g_trace = nullptr;  // CUPTI's callbacks take no user pointer

// "void deltatune::foo_kernel<128, true>(Args...)" -> "deltatune::foo_kernel<128, true>".
std::string short_name(const char* mangled) {
    if (!mangled) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    std::free(d);
    for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) {
        s.erase(at, 23);
    }
    // Cut the argument list: the first '(' at template depth 0.
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
        if (s[i] == '(' && depth == 0) {
            s.resize(i);
            break;
        }
    }
    if (s.rfind("void ", 0) == 0) s.erase(0, 5);
    return s.size() > 160 ? s.substr(0, 160) : s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = 8 << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
}

void add_event(StepTrace::Kind kind, std::string name, uint32_t lane, uint64_t start,
               uint64_t end) {
    if (g_trace->keep_events) g_trace->events.push_back({kind, std::move(name), lane, start, end});
}

const char* copy_kind(uint8_t k) {
    switch (k) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "memcpy PtoP";
        default:
            return "memcpy";
    }
}

void record(const CUpti_Activity* rec) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        // Names are mangled (_Z...ncclDevKernel...): match anywhere.
        const bool nccl = k->name && std::strstr(k->name, "nccl") != nullptr;
        (nccl ? g_trace->comm : g_trace->compute).emplace_back(k->start, k->end);
        std::string name = short_name(k->name);
        StepTrace::KernelTotal& t = g_trace->by_kernel[name];
        ++t.launches;
        t.ns += k->end - k->start;
        add_event(nccl ? StepTrace::Kind::kNccl : StepTrace::Kind::kKernel, std::move(name),
                  k->streamId, k->start, k->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        g_trace->memory.emplace_back(m->start, m->end);
        add_event(StepTrace::Kind::kMemcpy, copy_kind(m->copyKind), m->streamId, m->start, m->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        g_trace->memory.emplace_back(m->start, m->end);
        add_event(StepTrace::Kind::kMemset, "memset", m->streamId, m->start, m->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        const char* fn = nullptr;
        cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &fn);
        add_event(StepTrace::Kind::kRuntime, fn ? fn : "cuda runtime", r->threadId, r->start,
                  r->end);
    }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (g_trace) record(rec);
    }
    std::free(buffer);
}
#endif

}  // namespace

std::vector<std::tuple<std::string, int64_t, double>> top_kernels(const StepTrace& trace,
                                                                  size_t n) {
    std::vector<std::tuple<std::string, int64_t, double>> out;
    for (const auto& [name, t] : trace.by_kernel) {
        out.emplace_back(name, t.launches, static_cast<double>(t.ns) * 1e-6);
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
    if (out.size() > n) out.resize(n);
    return out;
}

std::map<std::string, double> kernel_ms_by_part(const StepTrace& trace) {
    // First match wins; names are demangled without arguments.
    static const std::pair<const char*, std::vector<const char*>> kParts[] = {
        {"gemm", {"nvjet", "gemm", "cutlass", "xmma", "cublas"}},
        {"nccl", {"nccl"}},
        {"optimizer", {"adamw", "grad_norm", "square_sum", "from_square"}},
        {"gdn",
         {"gdn_", "gated_delta", "conv1d", "conv_", "gated_rmsnorm", "l2norm", "gates_", "rule_"}},
        {"attention",
         {"attention", "flash", "qk_norm_rope", "gate_forward", "gate_backward", "list_tiles",
          "dq_", "dkv_", "ds_dq"}},
        {"loss", {"cross_entropy", "loss_sum"}},
    };
    std::map<std::string, double> out;
    for (const auto& [name, t] : trace.by_kernel) {
        std::string part = "other";
        for (const auto& [p, needles] : kParts) {
            const bool hit = std::any_of(needles.begin(), needles.end(), [&](const char* n) {
                return name.find(n) != std::string::npos;
            });
            if (hit) {
                part = p;
                break;
            }
        }
        out[part] += static_cast<double>(t.ns) * 1e-6;
    }
    return out;
}

absl::Status start_trace(StepTrace* trace) {
#if DELTATUNE_HAVE_CUDA
    g_trace = trace;
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        g_trace = nullptr;
        return absl::UnavailableError("CUPTI activity tracing unavailable");
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (trace->keep_events) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
    return absl::OkStatus();
#else
    (void)trace;
    return absl::UnavailableError("built without CUDA");
#endif
}

void stop_trace() {
#if DELTATUNE_HAVE_CUDA
    if (!g_trace) return;
    cudaDeviceSynchronize();  // the traced work's last kernels have ended: their records exist
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    g_trace = nullptr;
#endif
}

std::string chrome_trace_json(const StepTrace& trace, const std::string& label) {
    uint64_t t0 = UINT64_MAX;
    for (const StepTrace::Event& e : trace.events) t0 = std::min(t0, e.start);
    constexpr int kGpu = 1, kHost = 2;
    nlohmann::json events = nlohmann::json::array();
    auto name_process = [&](int pid, const std::string& name) {
        events.push_back(
            {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
    };
    name_process(kGpu, label + " GPU");
    name_process(kHost, label + " host");
    std::set<std::pair<int, uint32_t>> lanes;
    static const char* const kCategory[] = {"kernel", "nccl", "memcpy", "memset", "cuda_runtime"};
    for (const StepTrace::Event& e : trace.events) {
        const int pid = e.kind == StepTrace::Kind::kRuntime ? kHost : kGpu;
        if (lanes.insert({pid, e.lane}).second) {
            events.push_back(
                {{"name", "thread_name"},
                 {"ph", "M"},
                 {"pid", pid},
                 {"tid", e.lane},
                 {"args", {{"name", absl::StrCat(pid == kGpu ? "stream " : "thread ", e.lane)}}}});
        }
        events.push_back({{"name", e.name},
                          {"cat", kCategory[static_cast<int>(e.kind)]},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", e.lane},
                          {"ts", static_cast<double>(e.start - t0) * 1e-3},
                          {"dur", static_cast<double>(e.end - e.start) * 1e-3}});
    }
    return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump();
}

double union_ms(std::vector<std::pair<uint64_t, uint64_t>> spans) {
    uint64_t t = 0;
    for (const auto& s : merged(std::move(spans))) t += s.second - s.first;
    return static_cast<double>(t) * 1e-6;
}

double uncovered_ms(std::vector<std::pair<uint64_t, uint64_t>> a,
                    std::vector<std::pair<uint64_t, uint64_t>> b) {
    const Spans x = merged(std::move(a)), y = merged(std::move(b));
    uint64_t t = 0;
    size_t j = 0;
    for (const auto& s : x) {
        uint64_t at = s.first;
        while (j < y.size() && y[j].second <= at) ++j;
        for (size_t k = j; k < y.size() && y[k].first < s.second; ++k) {
            if (y[k].first > at) t += y[k].first - at;
            at = std::max(at, y[k].second);
            if (at >= s.second) break;
        }
        if (at < s.second) t += s.second - at;
    }
    return static_cast<double>(t) * 1e-6;
}

}  // namespace deltatune::daemon
