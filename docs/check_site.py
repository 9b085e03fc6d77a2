"""Open the built site in a real browser and check what a reader sees.

    python docs/check_site.py [SITE_DIR] [--screenshots DIR]

Serves SITE_DIR (default `site/`, what `mkdocs build` writes) on 127.0.0.1, drives Debian's
headless Chromium through chromedriver (selenium), and checks that the home page, a tutorial and
an API page render — their headings, text and every image loaded (the tutorial's plots, the home
page's benchmark chart) — and that the site's search finds `infer_discrete` on the API page. Exits
1 naming what failed. Needs `apt-get install chromium chromium-driver` and `pip install
selenium` (the `docs` extra).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import tempfile
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PAGES = [  # (path, what it is, at least this many images, a selector that must be there)
    ("", "home page", 1, "article h1"),
    ("tutorials/first-model/", "tutorial", 4, "article pre code"),
    ("api/mcmc/", "API page", 0, '[id="effppl.infer.MCMC"]'),
]


def _serve(root: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _browser(profile: str):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--window-size=1280,1600"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _images(driver):
    """(loaded, broken) images of the page's article."""
    states = driver.execute_script(
        "return Array.from(document.querySelectorAll('article img')).map("
        "i => i.complete && i.naturalWidth > 0);")
    return states.count(True), states.count(False)


def check(site: Path, shots: Path | None) -> list[str]:
    failures = []
    server = _serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    with tempfile.TemporaryDirectory() as profile:
        driver = _browser(profile)
        try:
            wait = WebDriverWait(driver, 30)
            for path, what, min_images, selector in PAGES:
                driver.get(base + path)
                wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
                wait.until(lambda d: all(d.execute_script(
                    "return Array.from(document.querySelectorAll('article img'))"
                    ".map(i => i.complete);")))
                title = driver.title
                loaded, broken = _images(driver)
                found = driver.find_elements(By.CSS_SELECTOR, selector)
                text = driver.find_element(By.CSS_SELECTOR, "article").text
                print(f"{what} ({path or '/'}): title {title!r}, {loaded} images loaded, "
                      f"{broken} broken, {len(text)} characters of text")
                if "effppl" not in title:
                    failures.append(f"{what}: title {title!r}")
                if broken or loaded < min_images:
                    failures.append(f"{what}: {loaded} images loaded ({min_images} expected), "
                                    f"{broken} broken")
                if not found:
                    failures.append(f"{what}: nothing matches {selector!r}")
                if len(text) < 500:
                    failures.append(f"{what}: only {len(text)} characters of text")
                if shots:
                    driver.save_screenshot(str(shots / f"{what.replace(' ', '_')}.png"))

            # the search box: type, wait for results, find the API entry of infer_discrete
            driver.get(base)
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            driver.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input")
            box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
            driver.execute_script("arguments[0].focus();", box)
            box.send_keys("infer_discrete")
            deadline, hits = time.time() + 30, []
            while time.time() < deadline and not hits:
                hits = [(a.get_attribute("href"), a.text) for a in
                        driver.find_elements(By.CSS_SELECTOR, ".md-search-result__link")]
                time.sleep(0.5)
            if shots:
                driver.save_screenshot(str(shots / "search.png"))
            api_hits = [h for h, t in hits if "api/" in h and "infer_discrete" in t]
            print(f"search 'infer_discrete': {len(hits)} results, {len(api_hits)} in the API "
                  f"reference ({api_hits[:2]})")
            if not api_hits:
                failures.append(f"search: no API result for infer_discrete among {hits[:5]}")
        finally:
            driver.quit()
            server.shutdown()
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default="site")
    parser.add_argument("--screenshots", type=Path, default=None)
    args = parser.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").exists():
        print(f"{site}/index.html not found: run `mkdocs build` first", file=sys.stderr)
        return 2
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    failures = check(site, args.screenshots)
    for failure in failures:
        print("FAILED:", failure)
    print("site check:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
