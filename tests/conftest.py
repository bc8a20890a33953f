from tests.conftest_local_llm import *  # noqa
