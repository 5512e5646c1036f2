"""The offline tooling around the program: the runner, the stand-in cloud, the models and the plan."""
