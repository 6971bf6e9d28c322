// deltatuned: the supervisor. Today it loads and validates its YAML config; the control plane
// (gRPC FineTuningService, job store, scheduler, rank processes) is built by the daemon issue.
#include <cstdio>
#include <cstring>
#include <string>

#include "yaml-cpp/yaml.h"

int main(int argc, char** argv) {
    std::string config;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!std::strncmp(argv[i], "--config=", 9)) {
            config = argv[i] + 9;
        } else {
            std::fprintf(stderr, "usage: deltatuned --config configs/daemon.yaml\n");
            return 2;
        }
    }
    if (config.empty()) {
        std::fprintf(stderr, "usage: deltatuned --config configs/daemon.yaml\n");
        return 2;
    }
    try {
        const YAML::Node root = YAML::LoadFile(config);
        if (!root.IsMap()) {
            std::fprintf(stderr, "deltatuned: %s: the top level must be a mapping\n",
                         config.c_str());
            return 1;
        }
    } catch (const YAML::Exception& e) {
        std::fprintf(stderr, "deltatuned: %s: %s\n", config.c_str(), e.what());
        return 1;
    }
    std::fprintf(stderr, "deltatuned: %s is valid; serving is not implemented in this build\n",
                 config.c_str());
    return 3;
}
