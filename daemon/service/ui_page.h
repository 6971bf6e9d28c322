// The built-in dashboard page served at /ui and /ui/jobs/{id}: one self-contained HTML document
// (CSS and script inline, no external resources: clusters are often air-gapped), compiled in
// from daemon/service/ui/index.html.
#pragma once

#include <string>
#include <string_view>

namespace deltatune::daemon {

std::string_view ui_page_html();

// The Content-Security-Policy `html` is served with: its one inline <script> and one <style>
// allowed by their SHA-256 (no 'unsafe-inline'), fetches to this origin only, no framing.
std::string ui_content_security_policy(std::string_view html);

}  // namespace deltatune::daemon
