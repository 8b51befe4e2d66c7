"""Pages in a real browser: headless Chromium driven by Selenium."""
