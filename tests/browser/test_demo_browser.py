"""The demo page in a real headless browser (Debian's chromium and chromium-driver, driven by
selenium): type a sentence, press Translate, read the translation from the page and compare it with
generate(); a direction the model lacks shows the pipeline's refusal on the page. `make
test-browser` installs the browser and runs this folder (it is not part of `make test`);
DEMO_SCREENSHOT=path.png keeps the page's screenshot."""

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait
from test_demo import TEXT, generated, served

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def browser():
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "make test-browser installs Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1100,900",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    yield browser
    browser.quit()


def test_a_sentence_typed_into_the_page_comes_back_translated(models, browser, tmp_path):
    demo, _ = served(models / "en-de")
    try:
        browser.get(demo.local_url)
        wait = WebDriverWait(browser, 60)
        source = wait.until(
            expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "#source-text textarea"))
        )
        source.send_keys(TEXT)
        browser.find_element(By.ID, "translate").click()
        output = browser.find_element(By.CSS_SELECTOR, "#translation textarea")
        wait.until(lambda _: output.get_attribute("value"))
        assert output.get_attribute("value") == generated(models / "en-de", TEXT, 4)
        assert (
            browser.find_element(By.CSS_SELECTOR, "#seconds textarea")
            .get_attribute("value")
            .endswith(" s")
        )
        screenshot = Path(os.environ.get("DEMO_SCREENSHOT", tmp_path / "demo.png"))
        browser.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one

        direction = browser.find_element(By.CSS_SELECTOR, "#direction input")
        direction.click()
        direction.send_keys(Keys.CONTROL, "a")
        direction.send_keys("de-en", Keys.ENTER)
        browser.find_element(By.ID, "translate").click()
        refusal = "Unsupported direction de to en: this model translates ['en-de']"
        wait.until(lambda page: refusal in page.find_element(By.TAG_NAME, "body").text)
        browser.save_screenshot(str(screenshot.with_name(f"{screenshot.stem}-refusal.png")))
    finally:
        demo.close()
