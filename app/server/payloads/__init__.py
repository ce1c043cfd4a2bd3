"""Response bodies, built apart from the routes that send them."""
