"""Client-supplied input_ids outside [0, vocab_size) are refused in the tokenizer manager (a 400),
before they reach the embedding, whose IndexError would kill the scheduler process."""

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

VOCAB = 1024


def make_tokenizer_manager():
    """The state `_tokenize_one_request` reads before it tokenizes anything."""
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.model_config = SimpleNamespace(vocab_size=VOCAB)
    tm.server_args = SimpleNamespace(disable_radix_cache=False)
    tm.tokenizer = None
    tm.mm_processor = None
    return tm


class TestValidateInputIdsInVocab(CustomTestCase):
    def setUp(self):
        self.tm = make_tokenizer_manager()

    def check(self, input_ids):
        self.tm._validate_input_ids_in_vocab(input_ids, VOCAB)

    def test_ids_in_range_pass(self):
        self.check([0, 1, VOCAB - 1])
        self.check([[0, 5], [VOCAB - 1]])
        self.check([[], [3]])

    def test_id_at_vocab_size_is_refused_and_named(self):
        with self.assertRaisesRegex(
            ValueError,
            r"input_ids contains out-of-vocabulary token id 1024; valid range is \[0, 1024\)\.",
        ):
            self.check([5, VOCAB, 7])

    def test_negative_id_is_refused(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id -1;"):
            self.check([5, -1])

    def test_batch_of_sequences_is_checked_per_sequence(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id 5000;"):
            self.check([[1, 2], [3, 5000]])


class TestTokenizeOneRequestChecksInputIds(CustomTestCase):
    """The check runs where a request's own input_ids are taken."""

    def tokenize(self, input_ids):
        tm = make_tokenizer_manager()
        return asyncio.run(tm._tokenize_one_request(GenerateReqInput(input_ids=input_ids)))

    def test_out_of_vocab_input_ids_are_refused(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id 1024;"):
            self.tokenize([1, 2, VOCAB])

    def test_negative_input_ids_are_refused(self):
        with self.assertRaisesRegex(ValueError, "out-of-vocabulary token id -3;"):
            self.tokenize([-3, 2])


if __name__ == "__main__":
    unittest.main()
