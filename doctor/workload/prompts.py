"""Prompts for the load generator: fresh on every run, no prefix an engine could have cached.

A random seed per run (``new_seed``; a given seed repeats a run's prompts on purpose), a
distinct prompt per request, and first words that differ between requests, so an engine's
prompt cache cannot turn a prefill measurement into a cache hit: llama.cpp keeps every slot's
last prompt and up to 8 GiB more in host memory (``--cache-ram``), vLLM and SGLang share
prefixes between requests. Repeated prompts made a second run read TTFT p50 51 ms instead of
523 ms, with 131 of 136 prompt tokens served from the cache. No tokenizer is needed: each word
below is one token.
"""

from __future__ import annotations

import functools
import random

# Common English words: each is one token in the tokenizers of Llama, Gemma, Qwen and GPT
# (with its leading space), so n words make a prompt of about n tokens.
WORDS = ("the of and to in is it you that he was for on are with as his they be at one have "
         "this from or had by word but what some we can out other were all there when up use "
         "your how said an each she which do their time if will way about many then them "
         "write would like so these her long make thing see him two has look more day could "
         "go come did number sound no most people my over know water than call first who may "
         "down side been now find any new work part take get place made live where after back "
         "little only round man year came show every good me give our under name very through "
         "just form sentence great think say help low line differ turn cause much mean before "
         "move right boy old too same tell does set three want air well also play small end "
         "put home read hand port large spell add even land here must big high such follow "
         "act why ask men change went light kind off need house picture try us again animal "
         "point mother world near build self earth father head stand own page should country "
         "found answer school grow study still learn plant cover food sun four between state "
         "keep eye never last let thought city tree cross farm hard start might story saw far "
         "sea draw left late run while press close night real life few north open seem "
         "together next white children begin got walk example ease paper group always music "
         "those both mark often letter until mile river car feet care second book carry took "
         "science eat room friend began idea fish mountain stop once base hear horse cut sure "
         "watch color face wood main enough plain girl usual young ready above ever red list "
         "though feel talk bird soon body dog family direct pose leave song measure door "
         "product black short numeral class wind question happen complete ship area half rock "
         "order fire south problem piece told knew pass since top whole king space heard best "
         "hour better true during hundred five remember step early hold west ground interest "
         "reach fast verb sing listen six table travel less morning ten simple several vowel "
         "toward war lay against pattern slow center love person money serve appear road map "
         "rain rule govern pull cold notice voice unit power town fine certain fly fall lead "
         "cry dark machine note wait plan figure star box noun field rest correct able pound "
         "done beauty drive stood contain front teach week final gave green quick develop "
         "ocean warm free minute strong special mind behind clear tail produce fact street "
         "inch multiply nothing course stay wheel full force blue object decide surface deep "
         "moon island foot system busy test record boat common gold possible plane stead dry "
         "wonder laugh thousand ago ran check game shape equate hot miss brought heat snow "
         "tire bring yes distant fill east paint language among").split()


def new_seed() -> int:
    """A run's seed from the operating system's randomness (32 bits): two runs share their
    prompts once in four billion."""
    return random.SystemRandom().randrange(1 << 32)


@functools.lru_cache(maxsize=8)
def _lead_words(seed: int) -> tuple[str, ...]:
    order = list(WORDS)
    random.Random(seed).shuffle(order)
    return tuple(order)


def make_prompt(n_words: int, seed: int, index: int = 0) -> str:
    """Prompt number ``index`` of the run with ``seed``: about ``n_words`` tokens.

    Its first two words write ``index`` in base len(WORDS) over the run's own shuffle of the
    words, so within a run no two of the first 245,025 prompts begin alike and the cache can
    serve no prefix; across runs two prompts begin with the same word once in 495 (one token
    shared, beside the BOS). The other words are drawn from the seed and the index.
    """
    lead, n = _lead_words(seed), len(WORDS)
    rng = random.Random(f"{seed}:{index}")
    words = [lead[index % n], lead[(index // n) % n]]
    words += [rng.choice(WORDS) for _ in range(max(n_words - 2, 0))]
    return " ".join(words[:max(n_words, 1)])
