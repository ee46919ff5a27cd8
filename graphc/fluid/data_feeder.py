"""``fluid.DataFeeder``: turns a reader's minibatch (a list of samples) into a feed dict,
converted to each feed variable's declared dtype and shape."""
