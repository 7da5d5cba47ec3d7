"""Built-in models: pure nn.Modules, knowing nothing of DDP, optimizers or I/O."""
