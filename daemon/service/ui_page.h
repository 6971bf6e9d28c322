// The built-in dashboard page served at /ui and /ui/jobs/{id}: one self-contained HTML document
// (CSS and script inline, no external resources: clusters are often air-gapped), compiled in
// from daemon/service/ui/index.html.
#pragma once

#include <string_view>

namespace deltatune::daemon {

std::string_view ui_page_html();

}  // namespace deltatune::daemon
