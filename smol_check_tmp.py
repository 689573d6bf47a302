import time, torch
from npu_console.engine.models import load_model
p = "/tmp/smollm2-q8_0.gguf"
ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 1701, 339, 919]])
t = time.time(); q = load_model(p, load_as="int8", check_memory=False); tq = time.time() - t
with torch.inference_mode():
    native = q.model(input_ids=ids).logits[0]
    for m in q.model.modules():
        if hasattr(m, "backend"): m.backend = "reference"
    ref_int8 = q.model(input_ids=ids).logits[0]
t = time.time(); f = load_model(p, check_memory=False); tf = time.time() - t
with torch.inference_mode():
    fl = f.model(input_ids=ids).logits[0]
print(f"int8 load {tq:.1f}s, float load (conversion) {tf:.1f}s")
print("max|logit|", fl.abs().max().item())
print("int8 (reference backend) vs float path: max abs", (ref_int8 - fl).abs().max().item())
print("int8 (native kernels) vs float path: max abs", (native - fl).abs().max().item())
print("argmax equal:", bool((native.argmax(-1) == fl.argmax(-1)).all()))
