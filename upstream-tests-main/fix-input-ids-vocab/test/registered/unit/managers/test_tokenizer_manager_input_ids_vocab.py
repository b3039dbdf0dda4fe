"""Client-supplied input_ids outside [0, vocab_size) are refused in the tokenizer manager (a 400),
before they reach the embedding, whose IndexError kills the scheduler process."""

import asyncio
import unittest
from types import SimpleNamespace

from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

VOCAB = 704


def make_tokenizer_manager():
    """The state `_tokenize_one_request` reads for a request that brings its own input_ids; the
    length checks and the object it builds afterwards are recorded instead of run."""
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.model_config = SimpleNamespace(
        vocab_size=VOCAB, hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"])
    )
    tm.tokenizer = None
    tm.mm_processor = None
    tm.built = []
    tm._validate_one_request = lambda obj, input_ids: None
    tm._create_tokenized_object = lambda obj, text, input_ids, *rest: tm.built.append(
        list(input_ids)
    )
    return tm


class TestTokenizeOneRequestChecksInputIds(CustomTestCase):
    """The check runs where a request's own input_ids are taken, before the request is built."""

    def tokenize(self, input_ids):
        tm = make_tokenizer_manager()
        asyncio.run(tm._tokenize_one_request(GenerateReqInput(input_ids=input_ids)))
        return tm.built

    def test_ids_in_range_are_built(self):
        self.assertEqual(self.tokenize([0, 5, VOCAB - 1]), [[0, 5, VOCAB - 1]])

    def test_id_at_vocab_size_is_refused_and_named(self):
        with self.assertRaisesRegex(
            ValueError,
            r"input_ids contains out-of-vocabulary token id 704; valid range is \[0, 704\)\.",
        ):
            self.tokenize([1, 2, VOCAB, 3])

    def test_negative_id_is_refused(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id -3;"):
            self.tokenize([-3, 2])

    def test_first_bad_id_is_named(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id 5000;"):
            self.tokenize([1, 5000, -1])


if __name__ == "__main__":
    unittest.main()
