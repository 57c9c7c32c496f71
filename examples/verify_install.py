# The article's verification program, unchanged: it must print True, torch.Size([100, 100])
# and a device name.
import torch
import torch_npu
print(torch.npu.is_available())
x = torch.randn(100, 100).npu()
y = torch.randn(100, 100).npu()
z = torch.matmul(x, y)
print(z.cpu().shape)
print(torch.npu.get_device_name(0))
