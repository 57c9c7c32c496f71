"""What amp.initialize decided, shared by scale_loss, state_dict and the patched optimizers
(apex keeps the same process-wide state: one set of loss scalers per process)."""


class _AmpState:
    def __init__(self):
        self.properties = None  # the resolved options (Properties), None before initialize
        self.loss_scalers = []  # one LossScaler per loss (num_losses)
        self.verbosity = 1


amp_state = _AmpState()


def maybe_print(msg):
    if amp_state.verbosity > 0:
        print(msg)
