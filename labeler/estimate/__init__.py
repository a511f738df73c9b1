"""All-traffic estimates: prediction-powered (PPI++) and active-inference means and ratios,
sampling designs and the all-traffic report."""
