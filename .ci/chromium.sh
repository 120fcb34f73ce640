#!/usr/bin/env bash
# Install what the browser tests (tests/test_site_browser.py) need: Debian's headless-capable
# chromium, its matching chromedriver, and the selenium client. Idempotent: apt runs only when
# a binary is missing, pip only when selenium does not import. Run as root on Debian
# (CI does: bash .ci/chromium.sh, before the tests). Playwright's own browser download does
# not work on these machines; Debian's chromium does.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# fonts-dejavu-core: a known font, so screenshots look the same on every machine
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
    echo "chromium.sh: installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${need[@]}" >/dev/null
fi
python3 -c "import selenium" 2>/dev/null || python3 -m pip install -q "selenium>=4.15,<5"
echo "chromium.sh: $(chromium --version 2>/dev/null | head -1); $(chromedriver --version | head -1)"
